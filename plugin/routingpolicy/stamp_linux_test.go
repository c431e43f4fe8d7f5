package routingpolicy

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// TestFileReloadSeesRename: R-ZONE-3 (every file reload). Regression: the reload check compared a
// file's modification time and size only: a file replaced by a rename (a new inode) of the same
// size and modification time was never reloaded.
func TestFileReloadSeesRename(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.yaml")
	put := func(path, body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, fixedNow, fixedNow); err != nil {
			t.Fatal(err)
		}
	}
	put(f, "- {name: www.example.org., type: A, rrdatas: [10.0.0.1]}\n")
	rp, _ := newTest(t, `routingpolicy example.org {
		reload 0
		recordsets `+f+`
	}`)
	// The same size and modification time, written beside it and renamed over it.
	tmp := filepath.Join(dir, "rs.yaml.tmp")
	put(tmp, "- {name: www.example.org., type: A, rrdatas: [10.0.0.2]}\n")
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	if !rp.reloadIfChanged(fixedNow) {
		t.Fatal("a file renamed over the loaded one, same size and modification time, is not reloaded")
	}
	if got := addrs(ask(t, rp, "www.example.org.", dns.TypeA, "10.1.1.1")); got != "10.0.0.2" {
		t.Fatalf("after the reload: %q", got)
	}
}

// statInfo is a fs.FileInfo with the system data the stamp reads.
type statInfo struct {
	fs.FileInfo
	st syscall.Stat_t
}

func (s statInfo) Sys() any { return &s.st }

// TestFileStampInodeAndCtime: R-ZONE-3 (every file reload). The stamp tells apart versions of a
// file that the modification time and size do not: a rewrite in place whose modification time was
// set back (cp -p, tar, rsync -t) changes the status change time (ctime), which no one can set; a
// rename gives another inode.
func TestFileStampInodeAndCtime(t *testing.T) {
	fi, err := os.Stat("testdata/export.json")
	if err != nil {
		t.Fatal(err)
	}
	base := statInfo{FileInfo: fi, st: syscall.Stat_t{Ino: 7, Ctim: syscall.Timespec{Sec: fixedNow.Unix(), Nsec: 1}}}
	if same := base; stampOfInfo(same) != stampOfInfo(base) {
		t.Fatal("the same file's stamps differ")
	}
	ctime := base
	ctime.st.Ctim.Nsec = 2
	inode := base
	inode.st.Ino = 8
	for what, other := range map[string]statInfo{"ctime": ctime, "inode": inode} {
		if stampOfInfo(base) == stampOfInfo(other) {
			t.Errorf("a file with another %s has the same stamp", what)
		}
	}
}
