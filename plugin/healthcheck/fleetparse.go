package healthcheck

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	mwtls "github.com/coredns/coredns/plugin/pkg/tls"
)

// Defaults and limits of a fleet block (docs/DESIGN.md section 8).
const (
	defaultFleetPrefix       = "/coresteer/health"
	defaultReplicasPerRegion = 2
	maxReplicasPerRegion     = 10
	defaultFleetTimeout      = 3 * time.Second
	minFleetTimeout          = 100 * time.Millisecond
	maxFleetTimeout          = 60 * time.Second
	maxReplicaName           = 253
)

// fleetConfig is what a `fleet etcd ENDPOINT... { ... }` block says.
type fleetConfig struct {
	Endpoints         []string
	Prefix            string
	Replica           string
	ReplicasPerRegion int
	TLSFiles          []string // CERT KEY CACERT, as given
	TLS               *tls.Config
	Username          string
	Password          string
	Timeout           time.Duration
}

// identity is what makes a connection and a membership: two instances with the same identity
// share one fleet client (a reload keeps the membership, its lease and its watch).
// replicas_per_region is not part of it: it decides the sharding, not the connection.
func (f *fleetConfig) identity() string {
	return strings.Join([]string{
		strings.Join(f.Endpoints, ","), f.Prefix, f.Replica,
		strings.Join(f.TLSFiles, ","), f.Username, f.Password, f.Timeout.String(),
	}, "\x00")
}

// name is the fleet's prefix and this replica's name: two memberships of this process with the
// same name (during a reload that changed the connection) share the member key.
func (f *fleetConfig) name() string { return f.Prefix + "\x00" + f.Replica }

var replicaName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// parseFleet reads `fleet etcd ENDPOINT... { ... }`, the current token being fleet.
func parseFleet(c *caddy.Controller) (*fleetConfig, error) {
	args := c.RemainingArgs()
	if len(args) == 0 || args[0] != "etcd" {
		got := "nothing"
		if len(args) > 0 {
			got = strconv.Quote(args[0])
		}
		return nil, c.Errf("fleet: store %s unknown (want etcd, as in `fleet etcd ENDPOINT...`)", got)
	}
	f := &fleetConfig{
		Prefix:            defaultFleetPrefix,
		ReplicasPerRegion: defaultReplicasPerRegion,
		Timeout:           defaultFleetTimeout,
	}
	eps := args[1:]
	if len(eps) == 0 {
		return nil, c.Errf("fleet etcd needs at least one ENDPOINT (HOST:PORT, http://HOST:PORT or https://HOST:PORT)")
	}
	for _, e := range eps {
		ep, err := parseEndpoint(e)
		if err != nil {
			return nil, c.Errf("fleet etcd: endpoint %q: %v (want HOST:PORT, http://HOST:PORT or https://HOST:PORT)", e, err)
		}
		f.Endpoints = append(f.Endpoints, ep)
	}
	if err := fleetBlock(c, f); err != nil {
		return nil, err
	}
	if f.Replica == "" {
		h, err := os.Hostname()
		if err != nil || !replicaName.MatchString(h) || len(h) > maxReplicaName {
			return nil, c.Errf("fleet etcd: the host name %q cannot name this replica: set replica NAME", h)
		}
		f.Replica = h
	}
	for i, e := range f.Endpoints {
		switch {
		case !strings.Contains(e, "://") && f.TLS != nil:
			f.Endpoints[i] = "https://" + e
		case !strings.Contains(e, "://"):
			f.Endpoints[i] = "http://" + e
		case f.TLS != nil && strings.HasPrefix(e, "http://"):
			return nil, c.Errf("fleet etcd: endpoint %q with tls: want https:// (or HOST:PORT)", e)
		}
	}
	return f, nil
}

// parseEndpoint checks an etcd endpoint, HOST:PORT or SCHEME://HOST:PORT with scheme http or
// https, and returns it without a trailing '/'. A bare HOST:PORT gets its scheme from tls.
func parseEndpoint(e string) (string, error) {
	hostport, scheme := e, ""
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return "", err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("scheme %q", u.Scheme)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
			return "", errors.New("a path, query or user in it")
		}
		hostport, scheme = u.Host, u.Scheme+"://"
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", errors.New("no port")
	}
	if host == "" {
		return "", errors.New("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q out of range 1..65535", port)
	}
	return scheme + net.JoinHostPort(host, port), nil
}

// fleetBlock reads the properties of the optional fleet block.
func fleetBlock(c *caddy.Controller, f *fleetConfig) error {
	seen := map[string]bool{}
	return subBlock(c, func(prop string, args []string) error {
		if seen[prop] {
			return c.Errf("fleet etcd: %s given twice", prop)
		}
		seen[prop] = true
		one := func() (string, error) {
			if len(args) != 1 {
				return "", c.Errf("fleet etcd: %s needs exactly one value, got %d", prop, len(args))
			}
			return args[0], nil
		}
		switch prop {
		case "prefix":
			v, err := one()
			if err != nil {
				return err
			}
			p := strings.TrimRight(v, "/")
			if !strings.HasPrefix(v, "/") || p == "" || strings.ContainsAny(v, " \t") || strings.Contains(p, "//") {
				return c.Errf("fleet etcd: prefix %q: want a path such as /coresteer/health (starts with '/', not only '/', no spaces or '//')", v)
			}
			f.Prefix = p
		case "replica":
			v, err := one()
			if err != nil {
				return err
			}
			if !replicaName.MatchString(v) || len(v) > maxReplicaName {
				return c.Errf("fleet etcd: replica %q: want 1..%d letters, digits, '_', '.' or '-', starting with a letter or digit", v, maxReplicaName)
			}
			f.Replica = v
		case "replicas_per_region":
			v, err := one()
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxReplicasPerRegion {
				return c.Errf("fleet etcd: replicas_per_region %q out of range 1..%d", v, maxReplicasPerRegion)
			}
			f.ReplicasPerRegion = n
		case "tls":
			if len(args) != 3 {
				return c.Errf("fleet etcd: tls needs CERT KEY CACERT, got %d arguments", len(args))
			}
			cfg, err := loadTLS(args[0], args[1], args[2])
			if err != nil {
				return c.Errf("fleet etcd: tls: %v", err)
			}
			f.TLSFiles, f.TLS = args, cfg
		case "credentials":
			if len(args) != 2 {
				return c.Errf("fleet etcd: credentials needs USER PASSWORD, got %d arguments", len(args))
			}
			if args[0] == "" {
				return c.Errf("fleet etcd: credentials: empty user name")
			}
			f.Username, f.Password = args[0], args[1]
		case "timeout":
			v, err := one()
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < minFleetTimeout || d > maxFleetTimeout {
				return c.Errf("fleet etcd: timeout %q out of range %s..%s", v, minFleetTimeout, maxFleetTimeout)
			}
			f.Timeout = d
		default:
			return c.Errf("fleet etcd: unknown property %q (want prefix, replica, replicas_per_region, tls, credentials or timeout)", prop)
		}
		return nil
	})
}

// loadTLS builds the client TLS configuration as CoreDNS's etcd plugin does, with errors that
// name the file at fault.
func loadTLS(cert, key, ca string) (*tls.Config, error) {
	for _, f := range []string{cert, key, ca} {
		if _, err := os.ReadFile(f); err != nil { //nolint:gosec // the operator's own file, named in the Corefile
			return nil, fmt.Errorf("file %s: %v", f, err)
		}
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %v", cert, key, err)
	}
	pem, _ := os.ReadFile(ca) //nolint:gosec // as above
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("file %s: no PEM certificate in it (want the CA certificate)", ca)
	}
	return mwtls.NewTLSConfigFromArgs(cert, key, ca)
}
