package routingpolicy

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

func ecsQuery(name, subnet string, bits uint8) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	o := m.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: bits, Address: net.ParseIP(subnet).To4()})
	return m
}

func scope(m *dns.Msg) (uint8, bool) {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*dns.EDNS0_SUBNET); ok {
				return s.SourceScope, true
			}
		}
	}
	return 0, false
}

func TestLocationECS(t *testing.T) {
	// L-1: a public zone uses the ECS address and sets the scope; a private one ignores ECS.
	pub, _ := newTest(t, `routingpolicy example.org {
		public`+geoLoc+`
		geo www A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1"
	}`)
	m := askMsg(t, pub, ecsQuery("www.example.org.", "10.2.3.0", 24), "10.1.1.1")
	if got := addrs(m); got != "10.0.2.1" {
		t.Fatalf("public zone with ECS from Europe: got %s", got)
	}
	if s, ok := scope(m); !ok || s != 24 {
		t.Fatalf("public zone: ECS scope %d (present %v), want 24", s, ok)
	}
	// Source prefix 0: the client address.
	m = askMsg(t, pub, ecsQuery("www.example.org.", "10.2.3.0", 0), "10.1.1.1")
	if got := addrs(m); got != "10.0.1.1" {
		t.Fatalf("ECS /0 must be ignored: got %s", got)
	}

	priv, _ := newTest(t, `routingpolicy example.org {`+geoLoc+`
		geo www A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1"
	}`)
	m = askMsg(t, priv, ecsQuery("www.example.org.", "10.2.3.0", 24), "10.1.1.1")
	if got := addrs(m); got != "10.0.1.1" {
		t.Fatalf("private zone must ignore ECS: got %s", got)
	}
	if s, ok := scope(m); ok && s != 0 {
		t.Fatalf("private zone set ECS scope %d", s)
	}
}

func TestLocationSubnets(t *testing.T) {
	// L-2: longest subnet wins, else the server's region.
	rp, _ := newTest(t, `routingpolicy example.org {
		region us-east1
		subnet europe-west2 10.2.0.0/16
		subnet asia-northeast1 10.2.5.0/24
		geo www A 60 "us-east1=10.0.1.1;europe-west2=10.0.2.1;asia-northeast1=10.0.3.1"
	}`)
	for client, want := range map[string]string{"10.2.1.1": "10.0.2.1", "10.2.5.1": "10.0.3.1", "192.0.2.1": "10.0.1.1"} {
		if got := one(t, rp, client); got != want {
			t.Errorf("client %s: got %s, want %s", client, got, want)
		}
	}
}

func TestLocationCustomCoordinates(t *testing.T) {
	// L-3: nearest by great-circle distance, with operator regions.
	rp, _ := newTest(t, `routingpolicy example.org {
		coordinates dc-paris 48.86 2.35
		coordinates dc-tokyo 35.68 139.69
		coordinates office-lyon 45.76 4.84
		coordinates office-osaka 34.69 135.50
		subnet office-lyon 10.5.0.0/16
		subnet office-osaka 10.6.0.0/16
		geo www A 60 "dc-tokyo=10.0.3.1;dc-paris=10.0.2.1"
	}`)
	if got := one(t, rp, "10.5.1.1"); got != "10.0.2.1" {
		t.Errorf("Lyon: got %s, want Paris", got)
	}
	if got := one(t, rp, "10.6.1.1"); got != "10.0.3.1" {
		t.Errorf("Osaka: got %s, want Tokyo", got)
	}
}
