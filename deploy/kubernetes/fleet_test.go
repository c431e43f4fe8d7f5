package kubernetes_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"

	corev1 "k8s.io/api/core/v1"
)

// The fleet lines of the ConfigMap's Corefile, commented out until the Secret exists (README.md,
// "Running a fleet").
const (
	fleetLine   = "# fleet etcd https://coresteer-etcd.kube-system.svc:2379 {"
	replicaLine = "#     replica {$POD_NAME}"
	tlsLine     = "#     tls /etc/coresteer/etcd/tls.crt /etc/coresteer/etcd/tls.key /etc/coresteer/etcd/ca.crt"
	closeLine   = "# }"
	etcdMount   = "/etc/coresteer/etcd"
)

// The pieces a fleet needs are in the manifests: POD_NAME from the pod's name through the downward
// API (the Corefile's replica), the TLS Secret mounted read-only (optional, so the Deployment runs
// without a fleet) where the Corefile's tls line reads it, and the prober region from REGION.
func TestFleetWiring(t *testing.T) {
	c := load(t)
	ctr := dnsContainer(t, c.deployment)
	i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
	if i < 0 || ctr.Env[i].ValueFrom == nil || ctr.Env[i].ValueFrom.FieldRef == nil || ctr.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Fatalf("POD_NAME is not the pod's name from the downward API: %+v", ctr.Env)
	}
	var vol *corev1.Volume
	for j, v := range c.deployment.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "coresteer-dns-etcd" {
			vol = &c.deployment.Spec.Template.Spec.Volumes[j]
		}
	}
	if vol == nil || vol.Secret.Optional == nil || !*vol.Secret.Optional {
		t.Fatalf("no optional volume of the Secret coresteer-dns-etcd: %+v", c.deployment.Spec.Template.Spec.Volumes)
	}
	m := slices.IndexFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol.Name })
	if m < 0 || ctr.VolumeMounts[m].MountPath != etcdMount || !ctr.VolumeMounts[m].ReadOnly {
		t.Fatalf("the Secret is not mounted read-only at %s: %+v", etcdMount, ctr.VolumeMounts)
	}
	cf := c.configMap.Data["Corefile"]
	for _, l := range []string{fleetLine, replicaLine, tlsLine, closeLine, "prober {$REGION}"} {
		if !strings.Contains(cf, l) {
			t.Errorf("the Corefile has no %q", l)
		}
	}
	if !strings.Contains(tlsLine, etcdMount+"/") {
		t.Errorf("the tls line does not read the Secret's mount %s", etcdMount)
	}
}

// F-1 with the ConfigMap's Corefile: its fleet lines, uncommented and pointed at a real etcd on
// loopback (plain HTTP: the TLS files are the cluster's), make the replica join the fleet under its
// pod name, with the prober region of its REGION, and leave it when the server stops.
func TestFleetFromConfigMap(t *testing.T) {
	t.Setenv("REGION", "europe-west1")
	t.Setenv("POD_NAME", "coresteer-dns-europe-west1-5d8c7-x2x9q")
	etcd := etcdtest.New(t)
	c := load(t)
	corefile := blocks(t, testCorefile(t, c.configMap.Data["Corefile"], upstream(t), backends(t)), usesAny("routingpolicy"))
	for _, r := range []rewrite{
		{fleetLine, "fleet etcd " + etcd.Endpoint + " {", "the fleet's etcd, on loopback"},
		{replicaLine, "    replica {$POD_NAME}", "the replica name"},
		{tlsLine, "", "TLS files of the cluster's Secret"},
		{closeLine, "}", "end of the fleet block"},
		// CoreDNS's metrics listener does not come back in the same process once a server that
		// had it stopped; TestConfigMapCorefileServes needs it.
		{"prometheus " + host + ":9153", "", "metrics listener"},
	} {
		if !strings.Contains(corefile, r.old) {
			t.Fatalf("the ConfigMap's Corefile has no %q (%s)", r.old, r.why)
		}
		corefile = strings.Replace(corefile, r.old, r.new, 1)
	}
	s := coretest.Start(t, corefile)
	cli := etcd.Client(t)
	key := "/coresteer/health/members/coresteer-dns-europe-west1-5d8c7-x2x9q"
	get := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, key)
		if err != nil || len(r.Kvs) == 0 {
			return ""
		}
		return string(r.Kvs[0].GetValue())
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(get(), `"web":["europe-west1"]`) {
		if time.Now().After(deadline) {
			t.Fatalf("no member %s with check web from europe-west1: %q", key, get())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	if v := get(); v != "" {
		t.Fatalf("member still registered after the server stopped: %q", v)
	}
}
