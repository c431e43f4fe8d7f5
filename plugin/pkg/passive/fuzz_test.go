package passive

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
)

// FuzzServeDNS: the handler healthcheck and pschealth add answers no query; any query a server
// accepts goes to the next plugin, whose reply reaches the client unchanged.
func FuzzServeDNS(f *testing.F) {
	coretest.FuzzPassThrough(f, New("healthcheck", func() bool { return true }, coretest.Echo))
}
