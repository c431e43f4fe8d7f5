// Package statusview is how the coresteer plugins show what they know to the status plugin
// (docs/DESIGN.md of the repository, section 9: S-1 to S-3): the types of the status page and of
// explain, and the process-wide list of the providers of the live configuration.
//
// Each plugin instance registers a Provider (and, when it answers queries, an Explainer) with
// Register, which ties it to the instance's lifecycle (plugin/pkg/lifecycle): it is listed from the
// instance's startup to its shutdown, and a failed reload's instance is taken off with everything
// else it started. While a reload runs, only the newest instance is shown, so the view is the live
// configuration's. Providers only read (S-3): Fill and Explain never write the board, a metric, a
// cache or anything a query reads.
package statusview

import (
	"net/netip"
	"time"
)

// View is everything the status page shows. Its JSON is /status.json.
type View struct {
	Generated     time.Time      `json:"generated"`
	Targets       []Target       `json:"targets"`
	LoadBalancers []LoadBalancer `json:"loadbalancers"`
	Composites    []Composite    `json:"composites"`
	RecordSets    []RecordSet    `json:"recordsets"`
	Outbound      []OutboundZone `json:"outbound"`
	Fleet         Fleet          `json:"fleet"`

	// probes are the healthcheck details of board targets, merged into Targets by Finish.
	probes map[string]Probe
}

// Target is one health-checked target of the health board: a probed (check, address), a
// load-balancer VIP or a composite destination (H-1).
type Target struct {
	Key     string    `json:"key"`   // check/address[:port], or the address of a derived VIP
	Check   string    `json:"check"` // empty for a derived VIP
	Address string    `json:"address"`
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason"`
	// Derived says what computes the state of a VIP with no check: "loadbalancer", "composite".
	Derived string `json:"derived,omitempty"`
	Probe   *Probe `json:"probe,omitempty"`
}

// Probe is how healthcheck probes one target: the per-region view of the last round (HC-2) and
// the progress towards the next threshold.
type Probe struct {
	Target     string        `json:"target"` // address:port probed
	Protocol   string        `json:"protocol"`
	Interval   time.Duration `json:"interval_ns"`
	LastRound  time.Time     `json:"last_round"`
	Regions    []RegionProbe `json:"regions"`
	Successes  int           `json:"consecutive_successes"`
	Failures   int           `json:"consecutive_failures"`
	ToHealthy  int           `json:"healthy_threshold"`
	ToUnhealth int           `json:"unhealthy_threshold"`
	// Progress says in words where the thresholds stand ("1 of 3 failures to unhealthy"); when
	// the fleet decides, that it does and its verdict, not this replica's own streak.
	Progress string `json:"progress"`
	// Decides is, in a fleet, "fleet" when the verdict on the board is the fleet's (F-3) and
	// "local" when it is this replica's (F-4); empty without a fleet.
	Decides string `json:"decides,omitempty"`
	// Shared are, in a fleet, the per-prober states the members published of the target, from
	// which the fleet's verdict is computed (F-3).
	Shared []SharedState `json:"shared,omitempty"`
}

// RegionProbe is one prober region's view of a target in the last round.
type RegionProbe struct {
	Region  string        `json:"region"`
	Verdict string        `json:"verdict"` // healthy, unhealthy, no result (HC-2, HC-3)
	Probers []ProberProbe `json:"probers"`
}

// ProberProbe is one prober's last attempt.
type ProberProbe struct {
	Source  string        `json:"source"` // the address it binds, "any" for the kernel's choice
	Result  string        `json:"result"` // healthy, unhealthy, no result, not yet
	Reason  string        `json:"reason,omitempty"`
	Latency time.Duration `json:"latency_ns"`
	At      time.Time     `json:"at"`
}

// LoadBalancer is a healthcheck load-balancer group (HC-4) with the arithmetic of its rule.
type LoadBalancer struct {
	VIP        string    `json:"vip"`
	Check      string    `json:"check"`
	State      string    `json:"state"`
	Since      time.Time `json:"since"`
	Backends   []Member  `json:"backends"`
	Healthy    int       `json:"healthy"`
	Total      int       `json:"total"`
	Threshold  int       `json:"threshold_percent"`
	Arithmetic string    `json:"arithmetic"` // "2/5 = 40 % >= 20 %: healthy"
}

// Member is a backend of a load balancer or of a health source.
type Member struct {
	Address string    `json:"address"`
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
}

// Composite is a pschealth composite check (P-3) and its sources.
type Composite struct {
	Name        string    `json:"name"`
	Destination string    `json:"destination"`
	State       string    `json:"state"`
	Since       time.Time `json:"since"`
	Reason      string    `json:"reason"`
	DryRun      bool      `json:"dry_run"`
	Published   bool      `json:"published"`
	Sources     []Source  `json:"sources"`
}

// Source is a pschealth health source (P-2) against its policy (P-1).
type Source struct {
	Name       string   `json:"name"`
	Check      string   `json:"check"`
	State      string   `json:"state"`
	Healthy    int      `json:"healthy"`
	Unknown    int      `json:"unknown"`
	Total      int      `json:"total"`
	Policy     string   `json:"policy"`
	MinPercent int      `json:"min_healthy_percent"`
	MinCount   int      `json:"min_healthy"`
	Arithmetic string   `json:"arithmetic"` // "2/3 = 66 % >= 60 % and 2 >= 1: healthy"
	Backends   []Member `json:"backends"`
}

// RecordSet is a routingpolicy record set with a policy.
type RecordSet struct {
	Server  string  `json:"server"`
	Zone    string  `json:"zone"`
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Policy  string  `json:"policy"` // wrr, geo, failover
	Fence   bool    `json:"fence,omitempty"`
	Trickle float64 `json:"trickle,omitempty"`
	// Answering is, for a failover, the side that answers queries from the server's own region
	// now: primary, backup, or fail open.
	Answering string `json:"answering,omitempty"`
	Items     []Item `json:"items"`
	Backup    []Item `json:"backup,omitempty"` // a failover's geo backup
}

// Item is a WRR bucket, a geo location or a failover primary set.
type Item struct {
	Label     string    `json:"label"`
	Weight    float64   `json:"weight"`
	Location  string    `json:"location,omitempty"`
	Healthy   bool      `json:"healthy"`
	Addresses []Address `json:"addresses"`
	// WRR: the configured share (weight over the sum of weights) and the share of the record
	// set's answers this item got since the record set was configured.
	Configured float64 `json:"configured_share"`
	Served     float64 `json:"served_share"`
	Answers    uint64  `json:"answers"`
}

// Address is one rdata of an item with its health.
type Address struct {
	Value   string    `json:"value"`
	Checked bool      `json:"checked"`
	Target  string    `json:"target,omitempty"` // the board key that decides it
	State   string    `json:"state"`            // healthy, unhealthy, unknown, unchecked
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason,omitempty"`
}

// OutboundZone is an outbound block's zones with their ranked endpoint x target pairs (O-5).
type OutboundZone struct {
	Server  string   `json:"server"`
	Zones   []string `json:"zones"`
	Targets string   `json:"targets"` // the targets, or the FQDN
	Pairs   []Pair   `json:"pairs"`
	Leaders []Leader `json:"leaders"`
	Note    string   `json:"note,omitempty"`
}

// Pair is one egress endpoint towards one target.
type Pair struct {
	Endpoint string  `json:"endpoint"`
	Region   string  `json:"region"`
	Source   string  `json:"source"`
	Target   string  `json:"target"`
	Rank     int     `json:"rank"` // 1 is first, for queries from the server's own region
	Ratio    float64 `json:"success_ratio"`
	// Latency is the smoothed latency; zero when no answer was timed yet.
	Latency     time.Duration `json:"latency_ns"`
	Up          bool          `json:"up"`
	LastOutcome time.Time     `json:"last_outcome"`
	// Why says what placed the pair: bands, distance, demotion.
	Why string `json:"why"`
}

// Leader is the pair that leads for the clients of one region.
type Leader struct {
	ClientRegion string `json:"client_region"`
	Endpoint     string `json:"endpoint"`
	Source       string `json:"source"`
	Target       string `json:"target"`
}

// Fleet is the healthcheck fleet (DESIGN.md section 8) as this replica sees it. Enabled is false
// while no healthcheck block runs a fleet: the page says "fleet off". The healthcheck block that
// runs a fleet fills it from its Fill, like everything else, from what its membership holds (no
// request to etcd): the members from their leases (F-1), for each (check, target) and prober
// region the members rendezvous hashing chooses (F-2), and whether the fleet's results decide
// (F-3) or this replica decides alone, and why (F-4).
type Fleet struct {
	Enabled           bool   `json:"enabled"`
	Self              string `json:"self,omitempty"` // this replica's name
	Prefix            string `json:"prefix,omitempty"`
	ReplicasPerRegion int    `json:"replicas_per_region,omitempty"`
	// Mode is "shared" while the fleet's results decide the checks (F-3), "fallback" while this
	// replica probes every target and decides alone (F-4); Why says why it falls back: not
	// joined yet, etcd unreachable, writes refused, warming up, a duplicate name.
	Mode string `json:"mode,omitempty"`
	Why  string `json:"why,omitempty"`
	// Heard is when the view was last known current (the time of the latest linearizable read
	// whose revision the watch had delivered): the view below is as of then.
	Heard   time.Time     `json:"etcd_heard"`
	Members []FleetMember `json:"members"`
	// Probes says who probes what: for each (check, target), the members chosen in each region.
	Probes []FleetProbe `json:"probes"`
}

// FleetMember is one replica registered in the fleet.
type FleetMember struct {
	Name    string   `json:"name"`
	Regions []string `json:"regions"` // the prober regions it registers, over all its checks
	// LeaseAlive: its member key, which lives under its lease, is in etcd as this replica's
	// current view has it; false while that view is not current (etcd unreachable).
	LeaseAlive bool `json:"lease_alive"`
	Self       bool `json:"self,omitempty"`
}

// FleetProbe is who probes one (check, target) from which region (F-2), and what decides it.
type FleetProbe struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	// Verdict is "fleet" when the board has the fleet's shared verdict (F-3), "local" when this
	// replica's own thresholds decided it.
	Verdict string        `json:"verdict"`
	Regions []FleetRegion `json:"regions"`
}

// FleetRegion is the members that probe a target from one prober region.
type FleetRegion struct {
	Region  string   `json:"region"`
	Members []string `json:"members"` // chosen by rendezvous hashing, highest score first
	// Here says this replica probed from the region in its last round: a chosen member does,
	// and in fallback every replica probes from every region of the check.
	Here bool `json:"probed_here"`
}

// SharedState is what one member published of a target from one region (F-3): how many of its
// probers there are healthy by their own thresholds, how many have a state, and why the first
// unhealthy one is. The fleet's verdict is HC-2 over the states that count.
type SharedState struct {
	Region  string `json:"region"`
	Member  string `json:"member"`
	Healthy int    `json:"healthy"`
	Decided int    `json:"decided"`
	Failure string `json:"failure,omitempty"`
	// Counts: the member registers the check from the region, in the process that wrote it.
	Counts bool `json:"counts"`
}

// AddProbe attaches p to the board target named key (health.Key.String()).
func (v *View) AddProbe(key string, p Probe) {
	if v.probes == nil {
		v.probes = make(map[string]Probe)
	}
	v.probes[key] = p
}

// Finish merges the probes into the targets.
func (v *View) Finish() {
	for i := range v.Targets {
		if p, ok := v.probes[v.Targets[i].Key]; ok {
			v.Targets[i].Probe = &p
		}
	}
	v.probes = nil
}

// Question is what explain is asked: why does this client get this answer?
type Question struct {
	Name   string     // fully qualified
	Type   uint16     // a DNS type
	Client netip.Addr // the address the query comes from
	// ECS is the EDNS Client Subnet the query carries; the zero Prefix for none.
	ECS netip.Prefix
}
