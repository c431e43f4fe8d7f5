package routingpolicy

import (
	"io/fs"
	"syscall"
)

// sysStamp returns the inode and status change time (nanoseconds) of fi, for its fileStamp.
func sysStamp(fi fs.FileInfo) (ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ino, st.Ctim.Nano()
}
