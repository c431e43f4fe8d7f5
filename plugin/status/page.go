package status

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// The pages are server-rendered from templates compiled into the binary: no script, no external
// asset; the style sheet is inline.
//
//go:embed page.html explain.html style.html
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"since":   since,
	"pct":     func(f float64) string { return fmt.Sprintf("%.1f %%", f*100) },
	"ms":      func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) },
	"join":    strings.Join,
	"stamp":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"state":   stateClass,
	"prob":    func(f float64) string { return fmt.Sprintf("%.4g", f) },
	"nonzero": func(t time.Time) bool { return !t.IsZero() },
	"bar":     func(f float64) string { return fmt.Sprintf("%.1fem", min(max(f, 0), 1)*8) },
}).ParseFS(files, "*.html"))

// pageData is what the status page renders.
type pageData struct {
	View     *statusview.View
	Sections []string
}

// explainData is what the explain page renders.
type explainData struct {
	Form   url.Values
	Error  string
	Result *explained
}

// form keeps what the explain form was given, to show it again.
func form(v url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"name", "type", "client", "ecs"} {
		if s := v.Get(k); len(s) <= maxParam {
			out.Set(k, s)
		}
	}
	return out
}

// render writes template name with data; a template error is a 500 with nothing half written.
func render(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		log.Errorf("Rendering %s: %v", name, err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// since says how long ago t was, coarsely.
func since(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := max(time.Since(t).Round(time.Second), 0)
	return d.String() + " ago"
}

// stateClass is the CSS class of a state.
func stateClass(s string) string {
	switch {
	case s == "healthy" || s == "primary" || s == "up":
		return "ok"
	case s == "unhealthy" || strings.HasPrefix(s, "fail open") || s == "down":
		return "bad"
	case strings.HasPrefix(s, "backup"):
		return "warn"
	}
	return "unk"
}
