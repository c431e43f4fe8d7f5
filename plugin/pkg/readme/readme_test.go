package readme

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSnippets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	doc := "# x\n\n~~~ corefile\nexample.org {\n    whoami\n}\n~~~\n\n~~~ txt\nnot this\n~~~\n\n~~~corefile\n. {\n}\n~~~\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Snippets(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0].Line != 4 || s[0].Text != "example.org {\n    whoami\n}\n" || s[1].Text != ". {\n}\n" {
		t.Fatalf("snippets = %+v", s)
	}
	if err := os.WriteFile(p, []byte("~~~ corefile\n. {\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Snippets(p); err == nil {
		t.Fatal("an unclosed block was accepted")
	}
}

func TestDirective(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	doc := "~~~ corefile\nexample.org {\n    whoami\n    p zone {\n        txt \"two words\" \"\"\n    }\n}\n~~~\n\n~~~ corefile\n. {\n    p\n}\n~~~\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Directive(p, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p zone {\ntxt \"two words\" \"\"\n}\n", "p\n"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Directive = %q, want %q", got, want)
	}
}
