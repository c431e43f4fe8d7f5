package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// strict decodes YAML into the registered Kubernetes API types by apiVersion and kind, and fails
// on unknown fields, duplicate fields and unknown kinds.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeDocs splits a YAML stream into documents and decodes each strictly. Documents holding
// only comments are skipped.
func decodeDocs(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if isEmptyDoc(doc) {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

func isEmptyDoc(doc []byte) bool {
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// cluster is every object of the manifests, by type.
type cluster struct {
	files          map[string][]runtime.Object
	serviceAccount *corev1.ServiceAccount
	role           *rbacv1.ClusterRole
	binding        *rbacv1.ClusterRoleBinding
	configMap      *corev1.ConfigMap
	deployment     *appsv1.Deployment
	service        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
}

// load decodes every manifest of this directory strictly.
func load(t *testing.T) *cluster {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no manifests (*.yaml) in deploy/kubernetes")
	}
	c := &cluster{files: map[string][]runtime.Object{}}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeDocs(data)
		if err != nil {
			t.Fatalf("%s: strict decoding: %v", p, err)
		}
		if len(objs) == 0 {
			t.Fatalf("%s: no Kubernetes object", p)
		}
		c.files[p] = objs
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.ServiceAccount:
				set(t, p, &c.serviceAccount, o)
			case *rbacv1.ClusterRole:
				set(t, p, &c.role, o)
			case *rbacv1.ClusterRoleBinding:
				set(t, p, &c.binding, o)
			case *corev1.ConfigMap:
				set(t, p, &c.configMap, o)
			case *appsv1.Deployment:
				set(t, p, &c.deployment, o)
			case *corev1.Service:
				set(t, p, &c.service, o)
			case *policyv1.PodDisruptionBudget:
				set(t, p, &c.pdb, o)
			default:
				t.Fatalf("%s: unexpected object %T", p, o)
			}
		}
	}
	for name, missing := range map[string]bool{
		"ServiceAccount": c.serviceAccount == nil, "ClusterRole": c.role == nil,
		"ClusterRoleBinding": c.binding == nil, "ConfigMap": c.configMap == nil,
		"Deployment": c.deployment == nil, "Service": c.service == nil,
		"PodDisruptionBudget": c.pdb == nil,
	} {
		if missing {
			t.Errorf("no %s in the manifests", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return c
}

func set[T any](t *testing.T, path string, dst **T, v *T) {
	t.Helper()
	if *dst != nil {
		t.Fatalf("%s: a second %T; the tests expect one of each", path, v)
	}
	*dst = v
}

func TestManifestsDecodeStrictly(t *testing.T) {
	c := load(t)
	for p, objs := range c.files {
		for _, o := range objs {
			gvk := o.GetObjectKind().GroupVersionKind()
			t.Logf("%s: %s", p, gvk)
		}
	}
}

// The strict decoder is what makes TestManifestsDecodeStrictly worth anything: show that it
// refuses a misspelt field, a duplicate field and an unknown kind.
func TestStrictDecodingRefusesMistakes(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": `apiVersion: v1
kind: Service
metadata: {name: kube-dns}
spec:
  clusterIp: 10.96.0.10
`,
		"duplicate field": `apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data: {Corefile: x}
data: {Corefile: y}
`,
		"unknown kind": `apiVersion: v1
kind: Servise
metadata: {name: kube-dns}
`,
		"unknown nested field": `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: a}
spec:
  maxUnavailable: 1
  minReady: 1
`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := decodeDocs([]byte(doc)); err == nil {
				t.Fatalf("decoded without error:\n%s", doc)
			}
		})
	}
}

func TestServiceIsKubeDNS(t *testing.T) {
	c := load(t)
	s := c.service
	if s.Name != "kube-dns" || s.Namespace != "kube-system" {
		t.Errorf("service is %s/%s, want kube-system/kube-dns (kubelets and every pod use it)", s.Namespace, s.Name)
	}
	if s.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("clusterIP %q, want the example 10.96.0.10 that README.md refers to", s.Spec.ClusterIP)
	}
	want := map[string]corev1.ServicePort{
		"dns":     {Port: 53, Protocol: corev1.ProtocolUDP},
		"dns-tcp": {Port: 53, Protocol: corev1.ProtocolTCP},
		"metrics": {Port: 9153, Protocol: corev1.ProtocolTCP},
	}
	if len(s.Spec.Ports) != len(want) {
		t.Errorf("service has %d ports, want %d (dns, dns-tcp, metrics)", len(s.Spec.Ports), len(want))
	}
	pod := c.deployment.Spec.Template
	ctr := dnsContainer(t, c.deployment)
	for _, p := range s.Spec.Ports {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("unexpected service port %q", p.Name)
			continue
		}
		if p.Port != w.Port || p.Protocol != w.Protocol {
			t.Errorf("service port %s is %d/%s, want %d/%s", p.Name, p.Port, p.Protocol, w.Port, w.Protocol)
		}
		if !containerHasPort(ctr, p.TargetPort.IntValue(), p.TargetPort.String(), p.Protocol) {
			t.Errorf("service port %s targets %s/%s, which the container does not expose", p.Name, p.TargetPort.String(), p.Protocol)
		}
	}
	if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("service selector %v does not select the pods (%v)", s.Spec.Selector, pod.Labels)
	}
	// The stock selector: stock and coresteer pods serve side by side during the switch.
	if len(s.Spec.Selector) != 1 || s.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Errorf("service selector %v, want the stock k8s-app=kube-dns alone", s.Spec.Selector)
	}
}

func containerHasPort(c *corev1.Container, number int, name string, proto corev1.Protocol) bool {
	for _, p := range c.Ports {
		if p.Protocol == proto && (int(p.ContainerPort) == number || p.Name == name) {
			return true
		}
	}
	return false
}

func dnsContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("deployment has %d containers, want 1", len(cs))
	}
	return &cs[0]
}

func TestConfigMapHasCorefile(t *testing.T) {
	c := load(t)
	cm := c.configMap
	if _, ok := cm.Data["Corefile"]; !ok {
		t.Fatalf("configmap %s has no Corefile key (keys: %v)", cm.Name, keys(cm.Data))
	}
	if cm.Namespace != "kube-system" {
		t.Errorf("configmap in namespace %q, want kube-system", cm.Namespace)
	}
	// The Deployment mounts this ConfigMap and runs with its Corefile.
	pod := c.deployment.Spec.Template.Spec
	ctr := dnsContainer(t, c.deployment)
	var mountedAt string
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
			continue
		}
		for _, m := range ctr.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			for _, it := range v.ConfigMap.Items {
				if it.Key == "Corefile" {
					mountedAt = filepath.Join(m.MountPath, it.Path)
				}
			}
		}
	}
	if mountedAt == "" {
		t.Fatalf("the deployment does not mount key Corefile of configmap %s", cm.Name)
	}
	if i := slices.Index(ctr.Args, "-conf"); i < 0 || i+1 >= len(ctr.Args) || ctr.Args[i+1] != mountedAt {
		t.Errorf("container args %q, want -conf %s", ctr.Args, mountedAt)
	}
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func TestProbesPointAtHealthAndReady(t *testing.T) {
	c := load(t)
	ctr := dnsContainer(t, c.deployment)
	ports := corefilePorts(t, c.configMap.Data["Corefile"])

	lp := ctr.LivenessProbe
	if lp == nil || lp.HTTPGet == nil {
		t.Fatal("no HTTP liveness probe")
	}
	if lp.HTTPGet.Path != "/health" || lp.HTTPGet.Port.IntValue() != ports["health"] {
		t.Errorf("liveness probe %s:%s, want /health:%d (the health plugin)", lp.HTTPGet.Path, lp.HTTPGet.Port.String(), ports["health"])
	}
	rp := ctr.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil {
		t.Fatal("no HTTP readiness probe")
	}
	if rp.HTTPGet.Path != "/ready" || rp.HTTPGet.Port.IntValue() != ports["ready"] {
		t.Errorf("readiness probe %s:%s, want /ready:%d (the ready plugin)", rp.HTTPGet.Path, rp.HTTPGet.Port.String(), ports["ready"])
	}
	if ports["health"] != 8080 || ports["ready"] != 8181 || ports["prometheus"] != 9153 {
		t.Errorf("Corefile listens for health/ready/metrics on %v, want 8080/8181/9153", ports)
	}
	if !containerHasPort(ctr, ports["prometheus"], "metrics", corev1.ProtocolTCP) {
		t.Errorf("container does not expose the metrics port %d", ports["prometheus"])
	}
	for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
		if !containerHasPort(ctr, 53, "", proto) {
			t.Errorf("container does not expose 53/%s", proto)
		}
	}
}

func TestDeployment(t *testing.T) {
	c := load(t)
	d := c.deployment
	if d.Namespace != "kube-system" {
		t.Errorf("deployment in namespace %q, want kube-system", d.Namespace)
	}
	if d.Spec.Replicas == nil {
		t.Error("replicas not set, want 2")
	} else if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	sel, err := metaSelector(d)
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("deployment selector %v does not match its template labels %v", sel, pod.Labels)
	}
	if pod.Spec.ServiceAccountName != c.serviceAccount.Name || c.serviceAccount.Namespace != d.Namespace {
		t.Errorf("pods run as %q, the manifest's service account is %s/%s", pod.Spec.ServiceAccountName, c.serviceAccount.Namespace, c.serviceAccount.Name)
	}
	if pod.Spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %q, want Default: the cluster DNS must not resolve through itself", pod.Spec.DNSPolicy)
	}

	// Non-root with NET_BIND_SERVICE, as the image expects (USER 65532, setcap on the binary).
	ctr := dnsContainer(t, d)
	psc, sc := pod.Spec.SecurityContext, ctr.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v, want runAsNonRoot and runAsUser 65532", psc)
	}
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext capabilities")
	}
	if !slices.Contains(sc.Capabilities.Add, "NET_BIND_SERVICE") || len(sc.Capabilities.Add) != 1 {
		t.Errorf("capabilities add %v, want NET_BIND_SERVICE alone", sc.Capabilities.Add)
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities drop %v, want ALL", sc.Capabilities.Drop)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
}

func metaSelector(d *appsv1.Deployment) (labels.Selector, error) {
	if d.Spec.Selector == nil {
		return nil, errors.New("deployment has no selector")
	}
	return labels.SelectorFromSet(d.Spec.Selector.MatchLabels), nil
}

// The replica's region: REGION comes from the pod's topology.kubernetes.io/region label through
// the downward API, and the nodeSelector pins the pods to nodes whose label has the same value,
// so REGION is the node's region (README.md, "The replica's region").
func TestRegionFromTopologyLabel(t *testing.T) {
	const key = "topology.kubernetes.io/region"
	c := load(t)
	d := c.deployment
	ctr := dnsContainer(t, d)
	var env *corev1.EnvVar
	for i := range ctr.Env {
		if ctr.Env[i].Name == "REGION" {
			env = &ctr.Env[i]
		}
	}
	if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil {
		t.Fatalf("REGION is not set from the downward API: %+v", env)
	}
	if got, want := env.ValueFrom.FieldRef.FieldPath, "metadata.labels['"+key+"']"; got != want {
		t.Errorf("REGION from %q, want %q", got, want)
	}
	region := d.Spec.Template.Labels[key]
	if region == "" {
		t.Fatalf("pod template has no %s label", key)
	}
	if got := d.Spec.Template.Spec.NodeSelector[key]; got != region {
		t.Errorf("nodeSelector %s=%q, pod label %q: the replica would claim a region it is not in", key, got, region)
	}
	if !strings.HasSuffix(d.Name, "-"+region) {
		t.Errorf("deployment %q is not named after its region %q (one Deployment per region)", d.Name, region)
	}
	if !strings.Contains(c.configMap.Data["Corefile"], "region {$REGION}") {
		t.Error("the Corefile does not read the region from {$REGION}")
	}
}

func TestRBACAsStockCoreDNS(t *testing.T) {
	c := load(t)
	b := c.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != c.role.Name {
		t.Errorf("binding refers to %s %q, want ClusterRole %q", b.RoleRef.Kind, b.RoleRef.Name, c.role.Name)
	}
	bound := false
	for _, s := range b.Subjects {
		if s.Kind == "ServiceAccount" && s.Name == c.serviceAccount.Name && s.Namespace == c.serviceAccount.Namespace {
			bound = true
		}
	}
	if !bound {
		t.Errorf("binding subjects %+v do not include the service account %s/%s", b.Subjects, c.serviceAccount.Namespace, c.serviceAccount.Name)
	}
	for _, need := range []struct{ group, resource string }{
		{"", "services"}, {"", "pods"}, {"", "namespaces"}, {"discovery.k8s.io", "endpointslices"},
	} {
		for _, verb := range []string{"list", "watch"} {
			if !allows(c.role, need.group, need.resource, verb) {
				t.Errorf("cluster role does not allow %s on %s.%s", verb, need.resource, need.group)
			}
		}
	}
	// Read only: the DNS server writes nothing to the API.
	for _, r := range c.role.Rules {
		for _, v := range r.Verbs {
			if v != "list" && v != "watch" && v != "get" {
				t.Errorf("cluster role grants %q on %v", v, r.Resources)
			}
		}
	}
}

func allows(r *rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
			return true
		}
	}
	return false
}

func TestPodDisruptionBudget(t *testing.T) {
	c := load(t)
	p := c.pdb
	if p.Namespace != c.deployment.Namespace {
		t.Errorf("PDB in %q, deployment in %q", p.Namespace, c.deployment.Namespace)
	}
	if p.Spec.Selector == nil {
		t.Fatal("PDB has no selector")
	}
	sel := labels.SelectorFromSet(p.Spec.Selector.MatchLabels)
	if !sel.Matches(labels.Set(c.deployment.Spec.Template.Labels)) {
		t.Errorf("PDB selector %v does not select the pods %v", sel, c.deployment.Spec.Template.Labels)
	}
	// Not the stock CoreDNS pods, which carry k8s-app: kube-dns alone.
	if sel.Matches(labels.Set{"k8s-app": "kube-dns"}) {
		t.Errorf("PDB selector %v also selects the stock CoreDNS pods", sel)
	}
	switch {
	case p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1:
	case p.Spec.MinAvailable != nil && p.Spec.MinAvailable.IntValue() >= 1:
	default:
		t.Errorf("PDB allows every replica down: %+v", p.Spec)
	}
}
