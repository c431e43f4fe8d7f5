package kubernetes_test

// The coresteer plugins, registered as cmd/coredns registers them, so the ConfigMap's Corefile
// starts with the same directives the image has.
import (
	_ "github.com/coresteer/coresteer/plugin/healthcheck"   // healthcheck directive
	_ "github.com/coresteer/coresteer/plugin/outbound"      // outbound directive
	_ "github.com/coresteer/coresteer/plugin/pschealth"     // pschealth directive
	_ "github.com/coresteer/coresteer/plugin/routingpolicy" // routingpolicy directive
)
