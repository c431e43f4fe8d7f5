// Package test holds the integration tests of the whole suite: each starts one real CoreDNS server
// from a Corefile (our directives placed by plugin/pkg/chain, as in cmd/coredns) and queries it.
// The scenarios reproduce the deployment patterns of the product references.
package test

import (
	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	_ "github.com/coresteer/coresteer/plugin/outbound"
	_ "github.com/coresteer/coresteer/plugin/pschealth"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"
	_ "github.com/coresteer/coresteer/plugin/status"
	_ "github.com/coresteer/coresteer/plugin/udpbatch"
)
