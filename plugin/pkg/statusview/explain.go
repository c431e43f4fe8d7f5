package statusview

// Explanation says why a client gets an answer from one plugin instance (S-2). Its JSON is
// /explain.json. Answer is set by routingpolicy, Forward by outbound.
type Explanation struct {
	Plugin   string   `json:"plugin"`
	Server   string   `json:"server"`
	Zone     string   `json:"zone"`
	Location Location `json:"location"`
	Answer   *Answer  `json:"answer,omitempty"`
	Forward  *Forward `json:"forward,omitempty"`
	// Note names the instances of the same server block that also serve the name but that the
	// query never reaches, this one answering first.
	Note string `json:"note,omitempty"`
}

// passesOn reports whether the instance hands the query on down the chain (fallthrough).
func (x *Explanation) passesOn() bool { return x.Answer != nil && x.Answer.PassedOn }

// Location is the client's region and how it was found (L-1, L-2).
type Location struct {
	Region string `json:"region"` // empty: no region (none configured for this server)
	// Address is the address the region was found from: the ECS address or the client's.
	Address string `json:"address"`
	// ECS is the client subnet used, empty when none was (a private zone, no ECS, prefix 0).
	ECS string `json:"ecs,omitempty"`
	// Subnet is the configured `subnet` line that matched, empty when none did and the server's
	// own region was used.
	Subnet string `json:"subnet,omitempty"`
	How    string `json:"how"`
	// Used says whether the answer depends on the region in some draw (geo does; a failover does
	// when the backup is consulted, by the trickle or because the primary is down; WRR and plain
	// records do not). Each outcome says whether its draw uses it (Outcome.Scope).
	Used bool `json:"used"`
}

// Answer is how routingpolicy answers: the record sets consulted, each policy's items and the
// possible results with their probabilities.
type Answer struct {
	Rcode string `json:"rcode"`
	// PassedOn is set when the name does not exist and `fallthrough` hands the query on.
	PassedOn bool `json:"passed_on,omitempty"`
	// Authoritative is the AA bit: a referral is not authoritative (R-ZONE-2).
	Authoritative bool `json:"aa"`
	// Referral is set when the name is under a zone cut: the answer delegates it (the cut's NS
	// and glue in Authority) instead of answering it.
	Referral bool `json:"referral,omitempty"`
	// Records is the answer section of one draw, as ServeDNS builds it.
	Records []string `json:"records"`
	// Authority is the authority section: the SOA of NXDOMAIN and NODATA, a referral's NS.
	Authority []string `json:"authority,omitempty"`
	// Scope is the ECS scope prefix the answer carries when a draw uses the client's region
	// (RFC 7871), -1 when no draw does or there is no client subnet. A draw that does not use
	// the region carries no ECS option: each outcome has the scope of its own draw.
	Scope int          `json:"ecs_scope"`
	Sets  []SetExplain `json:"sets"`
	Note  string       `json:"note,omitempty"`
}

// SetExplain is one record set with a policy that took part in the answer.
type SetExplain struct {
	Name    string        `json:"name"`
	Type    string        `json:"type"`
	Policy  string        `json:"policy"`
	Fence   bool          `json:"fence,omitempty"`
	Trickle float64       `json:"trickle,omitempty"`
	Items   []ItemExplain `json:"items"`
	Backup  []ItemExplain `json:"backup,omitempty"`
	// Outcomes are the possible results and their probabilities, which add up to 1: one for geo,
	// one per eligible bucket for WRR, primary and backup for a failover with trickle.
	Outcomes []Outcome `json:"outcomes"`
}

// ItemExplain is one item of a policy: in or out, and why.
type ItemExplain struct {
	Label     string    `json:"label"`
	Weight    float64   `json:"weight"`
	Location  string    `json:"location,omitempty"`
	Eligible  bool      `json:"eligible"`
	Why       string    `json:"why"`
	Addresses []Address `json:"addresses"`
}

// Outcome is one possible result of a policy.
type Outcome struct {
	Probability float64  `json:"probability"`
	Item        string   `json:"item"`
	Side        string   `json:"side,omitempty"` // failover: primary or backup
	Addresses   []string `json:"addresses"`
	FailOpen    bool     `json:"fail_open,omitempty"`
	Fallback    bool     `json:"fallback,omitempty"` // geo: not the nearest location (R-GEO-4)
	// UsesRegion says whether a draw of this outcome uses the client's region.
	UsesRegion bool `json:"uses_region,omitempty"`
	// Scope is the ECS scope prefix an answer of this draw carries, -1 for no ECS option: only a
	// draw that uses the client's region sets one (L-1).
	Scope int    `json:"ecs_scope"`
	Why   string `json:"why"`
}

// Forward is how outbound forwards: the ranked pairs for the client's region (O-5).
type Forward struct {
	Targets string `json:"targets"`
	Pairs   []Pair `json:"pairs"` // in rank order
	Note    string `json:"note,omitempty"`
}
