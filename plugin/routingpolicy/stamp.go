package routingpolicy

import (
	"io/fs"
	"os"
)

// fileStamp identifies the version of a file for the reload loop: a file whose stamp changed is
// read again. Besides the modification time and size, it holds what the system gives
// (stamp_linux.go): the inode, which a file renamed over the old one changes, and the status
// change time, which a write changes even when the modification time is set back or the write
// falls within the modification time's granularity.
type fileStamp struct {
	mod   int64 // modification time, in nanoseconds
	size  int64 // -1: the file could not be read
	ino   uint64
	ctime int64 // status change time, in nanoseconds
}

// stampOf returns the stamp of the file at path; the zero stamp for no file.
func stampOf(path string) fileStamp {
	if path == "" {
		return fileStamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	return stampOfInfo(fi)
}

func stampOfInfo(fi fs.FileInfo) fileStamp {
	s := fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}
	s.ino, s.ctime = sysStamp(fi)
	return s
}
