package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
)

// sections are the parts of /status.json that ?section= selects; the page links each.
var sections = []string{"targets", "loadbalancers", "composites", "recordsets", "outbound", "fleet"}

func (s *Status) page(w http.ResponseWriter, _ *http.Request) {
	render(w, http.StatusOK, "page", pageData{View: s.view(), Sections: sections})
}

func (s *Status) statusJSON(w http.ResponseWriter, r *http.Request) {
	v := s.view()
	sec := r.URL.Query().Get("section")
	var out any = v
	switch sec {
	case "":
	case "targets":
		out = v.Targets
	case "loadbalancers":
		out = v.LoadBalancers
	case "composites":
		out = v.Composites
	case "recordsets":
		out = v.RecordSets
	case "outbound":
		out = v.Outbound
	case "fleet":
		out = v.Fleet
	default:
		writeJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("parameter \"section\": %q is not one of %s", sec, strings.Join(sections, ", "))})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// explained is the body of /explain.json and what /explain renders.
type explained struct {
	Question     questionJSON              `json:"question"`
	Explanations []*statusview.Explanation `json:"explanations"`
	// Note says when nobody here answers the name.
	Note string `json:"note,omitempty"`
}

type questionJSON struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Client string `json:"client"`
	ECS    string `json:"ecs,omitempty"`
}

func (s *Status) explain(q statusview.Question) explained {
	out := explained{Question: questionJSON{Name: q.Name, Type: dns.TypeToString[q.Type], Client: q.Client.String()}}
	if out.Question.Type == "" {
		out.Question.Type = "TYPE" + strconv.Itoa(int(q.Type))
	}
	if q.ECS.IsValid() {
		out.Question.ECS = q.ECS.String()
	}
	out.Explanations = s.views.Explain(q)
	if len(out.Explanations) == 0 {
		out.Note = fmt.Sprintf("no routingpolicy or outbound block here answers %s: the query goes on down the plugin chain (file, forward, ...)", q.Name)
	}
	return out
}

func (s *Status) explainJSON(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuestion(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.explain(q))
}

func (s *Status) explainPage(w http.ResponseWriter, r *http.Request) {
	vals := r.URL.Query()
	d := explainData{Form: form(vals)}
	if len(vals) == 0 {
		render(w, http.StatusOK, "explain", d) // the empty form
		return
	}
	q, err := parseQuestion(vals)
	if err != nil {
		d.Error = err.Error()
		render(w, http.StatusBadRequest, "explain", d)
		return
	}
	x := s.explain(q)
	d.Result = &x
	render(w, http.StatusOK, "explain", d)
}

type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		log.Debugf("Writing JSON: %v", err)
	}
}

// Limits of the explain parameters.
const (
	maxParam = 512
)

// parseQuestion reads name, type, client and ecs. A missing or malformed parameter is an error
// that names it, says what it got and what is allowed.
func parseQuestion(v url.Values) (statusview.Question, error) {
	var q statusview.Question
	get := func(name string, required bool) (string, error) {
		vs, ok := v[name]
		if !ok || len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
			if required {
				return "", fmt.Errorf("parameter %q is missing", name)
			}
			return "", nil
		}
		if len(vs) > 1 {
			return "", fmt.Errorf("parameter %q is given %d times, once is allowed", name, len(vs))
		}
		s := strings.TrimSpace(vs[0])
		if len(s) > maxParam {
			return "", fmt.Errorf("parameter %q is %d bytes long, at most %d are allowed", name, len(s), maxParam)
		}
		return s, nil
	}
	name, err := get("name", true)
	if err != nil {
		return q, err
	}
	if _, ok := dns.IsDomainName(name); !ok || strings.ContainsAny(name, " \t") {
		return q, fmt.Errorf("parameter \"name\": %q is not a domain name", name)
	}
	q.Name = strings.ToLower(dns.Fqdn(name))
	if len(q.Name) > 255 {
		return q, fmt.Errorf("parameter \"name\": %q is longer than a domain name may be", name)
	}
	typ, err := get("type", true)
	if err != nil {
		return q, err
	}
	if q.Type, err = parseType(typ); err != nil {
		return q, fmt.Errorf("parameter \"type\": %w", err)
	}
	client, err := get("client", true)
	if err != nil {
		return q, err
	}
	a, err := netip.ParseAddr(client)
	if err != nil || a.Zone() != "" {
		return q, fmt.Errorf("parameter \"client\": %q is not an IP address (e.g. 192.0.2.1 or 2001:db8::1)", client)
	}
	q.Client = a.Unmap()
	ecs, err := get("ecs", false)
	if err != nil {
		return q, err
	}
	if ecs != "" {
		p, err := netip.ParsePrefix(ecs)
		if err != nil {
			return q, fmt.Errorf("parameter \"ecs\": %q is not a CIDR (e.g. 198.51.100.0/24)", ecs)
		}
		if p.Addr().Is4In6() {
			return q, fmt.Errorf("parameter \"ecs\": %q is an IPv4-mapped prefix; give the IPv4 prefix", ecs)
		}
		q.ECS = p.Masked()
	}
	return q, nil
}

var errType = errors.New("not a DNS type (A, AAAA, CNAME, MX, SRV, TXT, ... or TYPEnnn)")

// parseType reads a DNS type by its mnemonic or as TYPEnnn (RFC 3597).
func parseType(s string) (uint16, error) {
	u := strings.ToUpper(s)
	if t, ok := dns.StringToType[u]; ok && t != dns.TypeNone {
		return t, nil
	}
	if n, ok := strings.CutPrefix(u, "TYPE"); ok {
		if t, err := strconv.ParseUint(n, 10, 16); err == nil && t > 0 {
			return uint16(t), nil
		}
	}
	return 0, fmt.Errorf("%q is %w", s, errType)
}
