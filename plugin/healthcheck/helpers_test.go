package healthcheck

import (
	"io"
	"os"
)

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func osStderr() io.Writer { return os.Stderr }
