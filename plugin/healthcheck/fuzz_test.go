package healthcheck

import (
	"testing"

	"github.com/coredns/caddy"
)

// FuzzParse: no input makes the parser panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"healthcheck {\ncheck web {\nprotocol https\nport 443\nprober us-east1 127.0.0.2\n}\n}",
		"healthcheck {\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2 [::1]:80\ncheck web\nthreshold 50%\n}\ncheck web\n}",
		"healthcheck {\ncheck web {\n{\n}\n}",
		"healthcheck {\ncheck",
		"healthcheck {\ncoordinates x 1 2\nlog\nready_wait off\n}",
		"healthcheck {\ncheck web\nfleet etcd http://127.0.0.1:2379 {\nprefix /a\nreplica r1\nreplicas_per_region 1\ntimeout 1s\ncredentials u p\n}\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(_ *testing.T, in string) {
		parse(caddy.NewTestController("dns", in))
	})
}
