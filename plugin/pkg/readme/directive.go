package readme

import (
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
)

// Directive returns, as Corefile text, every block of the directive name in the "~~~ corefile"
// snippets of the Markdown file at path: what a plugin's parse function reads, so a fuzz target
// can start from the shapes its README documents.
func Directive(path, name string) ([]string, error) {
	snippets, err := Snippets(path)
	if err != nil {
		return nil, err
	}
	directives, err := chain.Order(dnsserver.Directives)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(directives, name) {
		directives = append(directives, name)
	}
	var out []string
	for _, s := range snippets {
		blocks, err := caddyfile.Parse(path, strings.NewReader(s.Text), directives)
		if err != nil {
			return nil, err
		}
		for _, sb := range blocks {
			if toks, ok := sb.Tokens[name]; ok {
				out = append(out, text(toks))
			}
		}
	}
	return out, nil
}

// text writes tokens back as Corefile text: one line per source line, tokens with spaces,
// quotes or nothing in them quoted.
func text(toks []caddyfile.Token) string {
	var b strings.Builder
	for i, t := range toks {
		if i > 0 {
			if t.Line != toks[i-1].Line {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
		}
		v := t.Text
		if v == "" || strings.ContainsAny(v, " \t\n\"") {
			v = `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
		}
		b.WriteString(v)
	}
	b.WriteByte('\n')
	return b.String()
}
