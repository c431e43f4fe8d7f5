// Package readme extracts the Corefile snippets of a README (blocks fenced as "~~~ corefile"), so
// tests can parse every one of them and the documentation cannot drift from the code.
package readme

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Snippet is one Corefile block of a README and the line it starts on.
type Snippet struct {
	Line int
	Text string
}

// Snippets returns the "~~~ corefile" blocks of the Markdown file at path.
func Snippets(path string) ([]Snippet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out  []Snippet
		cur  *strings.Builder
		from int
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "~~~") && strings.TrimSpace(strings.TrimPrefix(trimmed, "~~~")) == "corefile":
			cur, from = &strings.Builder{}, n+1
		case cur != nil && trimmed == "~~~":
			out = append(out, Snippet{Line: from, Text: cur.String()})
			cur = nil
		case cur != nil:
			cur.WriteString(line)
			cur.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: corefile block not closed with ~~~", path, from-1)
	}
	return out, nil
}
