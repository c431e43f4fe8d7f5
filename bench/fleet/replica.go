package main

import (
	"os"
	"path/filepath"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/metrics" // prometheus
	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"
)

// The replicas are this program started again (etcdtest.StartReplica), serving a Corefile with a
// real CoreDNS server built with only the plugins imported here (etcdtest.ServeReplica).

// startReplica starts a replica named name on addr serving corefile; it logs to dir/NAME.log.
func startReplica(dir, corefile, name, addr string) (*etcdtest.Replica, error) {
	logs, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logs.Close() // the replica has its own descriptor
	return etcdtest.StartReplica(name, addr, corefile, nil, nil, logs)
}

// metric is the sum of the replica's series of name, 0 when it has none.
func metric(r *etcdtest.Replica, name string) float64 {
	return max(r.Metric(name), 0)
}
