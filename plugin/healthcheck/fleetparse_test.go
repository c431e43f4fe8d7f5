package healthcheck

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
)

func TestParseFleetDefaults(t *testing.T) {
	cfg, err := parse(caddy.NewTestController("dns", `healthcheck {
		check web
		fleet etcd http://127.0.0.1:2379 http://127.0.0.2:2379/
	}`))
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.fleet
	host, _ := os.Hostname()
	if f == nil || !slices.Equal(f.Endpoints, []string{"http://127.0.0.1:2379", "http://127.0.0.2:2379"}) ||
		f.Prefix != "/coresteer/health" || f.Replica != host || f.ReplicasPerRegion != 2 || f.Timeout != 3*time.Second ||
		f.TLS != nil || f.Username != "" {
		t.Fatalf("defaults: %+v", f)
	}
}

func TestParseFleetFull(t *testing.T) {
	cert, key, ca := tlsFiles(t)
	cfg, err := parse(caddy.NewTestController("dns", `healthcheck {
		check web
		fleet etcd https://etcd-0.etcd:2379 https://etcd-1.etcd:2379 {
			prefix /prod/dns/health/
			replica coresteer-dns-europe-west1-7d9f-abcde
			replicas_per_region 3
			tls `+cert+` `+key+` `+ca+`
			credentials coresteer s3cret
			timeout 1500ms
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.fleet
	if f.Prefix != "/prod/dns/health" || f.Replica != "coresteer-dns-europe-west1-7d9f-abcde" || f.ReplicasPerRegion != 3 ||
		f.TLS == nil || len(f.TLS.Certificates) != 1 || f.TLS.RootCAs == nil || f.Username != "coresteer" || f.Password != "s3cret" ||
		f.Timeout != 1500*time.Millisecond {
		t.Fatalf("full: %+v", f)
	}
}

// Every bad fleet property is an error naming the property, the value and what is allowed; wrong
// TLS files name the file.
func TestParseFleetErrors(t *testing.T) {
	cert, key, ca := tlsFiles(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct{ body, want string }{
		{"fleet", "fleet: store nothing unknown (want etcd"},
		{"fleet consul http://127.0.0.1:8500", `fleet: store "consul" unknown (want etcd`},
		{"fleet etcd", "fleet etcd needs at least one ENDPOINT"},
		{"fleet etcd 127.0.0.1", `endpoint "127.0.0.1": no port (want HOST:PORT, http://HOST:PORT or https://HOST:PORT)`},
		{"fleet etcd ftp://127.0.0.1:2379", `endpoint "ftp://127.0.0.1:2379": scheme "ftp"`},
		{"fleet etcd http://127.0.0.1:2379/v3", `endpoint "http://127.0.0.1:2379/v3": a path, query or user in it`},
		{"fleet etcd http://127.0.0.1", `endpoint "http://127.0.0.1": no port`},
		{"fleet etcd http://127.0.0.1:99999", `endpoint "http://127.0.0.1:99999": port "99999" out of range 1..65535`},
		{"fleet etcd http://127.0.0.1:0", `endpoint "http://127.0.0.1:0": port "0" out of range 1..65535`},
		{"fleet etcd http://:2379", `endpoint "http://:2379": no host`},
		{"fleet etcd :2379", `endpoint ":2379": no host`},
		{"fleet etcd etcd-0:http", `endpoint "etcd-0:http": port "http" out of range 1..65535`},
		{"fleet etcd http://127.0.0.1:2379 {\nprefix\n}", "prefix needs exactly one value, got 0"},
		{"fleet etcd http://127.0.0.1:2379 {\nprefix coresteer\n}", `prefix "coresteer": want a path such as /coresteer/health`},
		{"fleet etcd http://127.0.0.1:2379 {\nprefix /\n}", `prefix "/": want a path`},
		{"fleet etcd http://127.0.0.1:2379 {\nprefix /a//b\n}", `prefix "/a//b": want a path`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplica a/b\n}", `replica "a/b": want 1..253 letters, digits`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplica -a\n}", `replica "-a": want`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplica a b\n}", "replica needs exactly one value, got 2"},
		{"fleet etcd http://127.0.0.1:2379 {\nreplicas_per_region 0\n}", `replicas_per_region "0" out of range 1..10`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplicas_per_region 11\n}", `replicas_per_region "11" out of range 1..10`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplicas_per_region two\n}", `replicas_per_region "two" out of range 1..10`},
		{"fleet etcd http://127.0.0.1:2379 {\ntimeout 3\n}", `timeout "3" out of range 100ms..1m0s`},
		{"fleet etcd http://127.0.0.1:2379 {\ntimeout 10ms\n}", `timeout "10ms" out of range 100ms..1m0s`},
		{"fleet etcd http://127.0.0.1:2379 {\ntimeout 2m\n}", `timeout "2m" out of range`},
		{"fleet etcd http://127.0.0.1:2379 {\ncredentials user\n}", "credentials needs USER PASSWORD, got 1 arguments"},
		{"fleet etcd http://127.0.0.1:2379 {\ntls " + cert + " " + key + "\n}", "tls needs CERT KEY CACERT, got 2 arguments"},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + missing + " " + key + " " + ca + "\n}", "tls: file " + missing + ": open " + missing + ": no such file"},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + cert + " " + missing + " " + ca + "\n}", "tls: file " + missing},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + cert + " " + key + " " + missing + "\n}", "tls: file " + missing},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + garbage + " " + key + " " + ca + "\n}", "tls: certificate " + garbage + " with key " + key + ":"},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + cert + " " + garbage + " " + ca + "\n}", "tls: certificate " + cert + " with key " + garbage + ":"},
		{"fleet etcd https://127.0.0.1:2379 {\ntls " + cert + " " + key + " " + garbage + "\n}", "tls: file " + garbage + ": no PEM certificate in it (want the CA certificate)"},
		{"fleet etcd http://127.0.0.1:2379 {\ntls " + cert + " " + key + " " + ca + "\n}", `endpoint "http://127.0.0.1:2379" with tls: want https://`},
		{"fleet etcd http://127.0.0.1:2379 {\nleader yes\n}", `unknown property "leader" (want prefix, replica, replicas_per_region, tls, credentials or timeout)`},
		{"fleet etcd http://127.0.0.1:2379 {\nreplica a\nreplica b\n}", "replica given twice"},
		{"fleet etcd http://127.0.0.1:2379\nfleet etcd http://127.0.0.1:2379", "fleet given twice"},
	}
	for _, tc := range tests {
		_, err := parse(caddy.NewTestController("dns", "healthcheck {\ncheck web\n"+tc.body+"\n}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %q", tc.body, err, tc.want)
		}
	}
}

// A bare HOST:PORT endpoint takes its scheme from tls: http without it, https with it.
func TestParseFleetBareEndpoints(t *testing.T) {
	cert, key, ca := tlsFiles(t)
	for _, tc := range []struct{ body, want string }{
		{"fleet etcd 127.0.0.1:2379", "http://127.0.0.1:2379"},
		{"fleet etcd [::1]:2379", "http://[::1]:2379"},
		{"fleet etcd etcd-0.etcd:2379 {\ntls " + cert + " " + key + " " + ca + "\n}", "https://etcd-0.etcd:2379"},
	} {
		cfg, err := parse(caddy.NewTestController("dns", "healthcheck {\ncheck web\n"+tc.body+"\n}"))
		if err != nil || !slices.Equal(cfg.fleet.Endpoints, []string{tc.want}) {
			t.Errorf("%q: %v %v, want %s", tc.body, cfg, err, tc.want)
		}
	}
}

// Bad input: the fleet's result keys are PREFIX/results/CHECK/TARGET/REGION/REPLICA, so a prober
// region with a '/' cannot be shared: in a fleet it is a configuration error naming the region.
// Without a fleet the region is fine.
func TestParseFleetRegionWithSlash(t *testing.T) {
	const block = `healthcheck {
		coordinates us/east1 37.0 -79.0
		check web {
			prober us/east1
		}
		%s
	}`
	_, err := parse(caddy.NewTestController("dns", fmt.Sprintf(block, "fleet etcd http://127.0.0.1:2379 {\nreplica r1\n}")))
	if err == nil || !strings.Contains(err.Error(), `prober region "us/east1" cannot be shared by a fleet`) {
		t.Fatalf("prober us/east1 in a fleet: %v, want an error naming the region", err)
	}
	if _, err := parse(caddy.NewTestController("dns", fmt.Sprintf(block, ""))); err != nil {
		t.Fatalf("prober us/east1 without a fleet: %v", err)
	}
}

// tlsFiles returns a client certificate, its key and the CA that signed it.
func tlsFiles(t *testing.T) (cert, key, ca string) {
	t.Helper()
	ca, cert, key = pki(t)
	return cert, key, ca
}

// pki writes a CA and, signed by it, a certificate for 127.0.0.1 good for a server and a client
// (etcd serves with it and the fleet connects with it), with its key.
func pki(t *testing.T) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "coresteer-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string][]byte{
		ca:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// tls CERT KEY CACERT reaches an etcd that serves HTTPS and requires client certificates; a
// CA that did not sign etcd's certificate does not (the replica stays alone and counts errors).
func TestFleetTLS(t *testing.T) {
	leakCheck(t)
	ca, cert, key := pki(t)
	etcd := etcdtest.NewTLS(t, &etcdtest.TLS{Cert: cert, Key: key, CA: ca, ClientCert: cert, ClientKey: key})
	otherCA, _, _ := pki(t)
	for _, tc := range []struct {
		name, ca string
		joins    bool
	}{{"right CA", ca, true}, {"another CA", otherCA, false}} {
		cfg, err := parse(caddy.NewTestController("dns", `healthcheck {
			check web
			fleet etcd `+etcd.Endpoint+` {
				prefix /test/tls
				replica tls-`+strings.ReplaceAll(tc.name, " ", "-")+`
				tls `+cert+` `+key+` `+tc.ca+`
				timeout 1s
			}
		}`))
		if err != nil {
			t.Fatal(err)
		}
		v := newFleetView(cfg.checks)
		f := joinFleet(cfg.fleet, v)
		if tc.joins {
			waitFor(t, "joined over TLS", func() bool { j, _ := joinedMode(f); return j })
		} else {
			waitFor(t, "an etcd error counted", func() bool {
				return gaugeValue(t, "coredns_healthcheck_fleet_etcd_errors_total", cfg.fleet.Replica) > 0
			})
			if j, _ := joinedMode(f); j {
				t.Error("joined with a CA that did not sign etcd's certificate")
			}
		}
		f.leave(v)
	}
}
