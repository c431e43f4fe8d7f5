package lifecycle

import "testing"

// H-6 during a reload: the old and the new instance both compute one thing; only the newest
// writes it, and when the newest leaves first (a failed reload) the one before writes again.
func TestWritersNewestWrites(t *testing.T) {
	ws := NewWriters()
	var got []string
	write := func(w *Writer, v string) { w.Write(func() { got = append(got, v) }) }
	rewrites := 0
	old, first := ws.Join("k", func() { rewrites++ })
	if !first {
		t.Fatal("the first writer is not first")
	}
	write(old, "old")
	next, first := ws.Join("k", nil)
	if first {
		t.Fatal("the second writer is first")
	}
	write(old, "old, late") // the old instance's computation finishing during the reload
	write(next, "new")
	if len(got) != 2 || got[1] != "new" {
		t.Fatalf("writes %q, want the old one's before the reload and the new one's", got)
	}
	next.Leave() // the new instance is abandoned
	next.Leave()
	if rewrites != 1 {
		t.Fatalf("%d rewrites asked of the old writer, want 1", rewrites)
	}
	write(old, "old again")
	if got[len(got)-1] != "old again" {
		t.Fatalf("writes %q", got)
	}
	other, _ := ws.Join("k", nil)
	old.Leave() // a successful reload: the old one leaves, the newest keeps writing, no rewrite
	if rewrites != 1 {
		t.Fatal("an old writer's leave asked for a rewrite")
	}
	other.Leave()
	if len(ws.line) != 0 {
		t.Fatalf("lines left: %v", ws.line)
	}
}
