package coretest

import (
	"bytes"
	golog "log"
	"strings"
	"sync"
	"testing"
)

// Log collects what plugins log (CoreDNS's log package writes through the standard logger)
// from any goroutine, for tests that check log lines.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// CaptureLog sends the standard logger to a new Log until tb ends.
func CaptureLog(tb testing.TB) *Log {
	tb.Helper()
	l := &Log{}
	prev := golog.Writer()
	golog.SetOutput(l)
	tb.Cleanup(func() { golog.SetOutput(prev) })
	return l
}

// Write implements io.Writer.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything logged so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines logged so far that contain every one of substrs.
func (l *Log) Lines(substrs ...string) []string {
	var out []string
	for line := range strings.SplitSeq(l.String(), "\n") {
		all := line != ""
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// Count returns how many lines logged so far contain every one of substrs.
func (l *Log) Count(substrs ...string) int { return len(l.Lines(substrs...)) }
