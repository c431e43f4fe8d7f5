// Package lifecycle registers a plugin's startup and shutdown so that what the startup took is
// given back in every case, including the one caddy leaves out: a reload whose new instance fails
// after some OnStartup hooks ran (a listener that cannot bind, a later plugin's startup error).
// caddy then drops the new instance without running its OnShutdown hooks and calls the old
// instance's OnRestartFailed. Without this, board references, probes and goroutines taken by the
// failed instance would live on for ever. The old instance may come from a Corefile without any
// of our plugins: lifecycle learns of every instance that starts through a caddy event hook.
//
// Series and Writers do the same for what instances share during a reload: metric series, deleted
// with the last instance that describes them, and computed states, written by the newest instance
// only. Together they keep H-6 (docs/DESIGN.md of the repository, section 2): what is probed and
// exported is what the live configuration names.
package lifecycle

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coredns/caddy"
)

// instance is the hooks of one Corefile instance whose startup ran.
type instance struct {
	gen      uint64 // Generation
	mu       sync.Mutex
	started  []func() error // stops of the hooks whose start succeeded, in start order
	children []*instance    // instances started by a reload of this one
	down     bool           // its shutdown began: a reload replaced it
}

type instanceKey struct{}

// generations numbers the instances in the order they are set up.
var generations atomic.Uint64

// Generation returns the generation of the Corefile instance c sets up: a reload's instance has a
// higher one than the instance it replaces (Writers).
func Generation(c *caddy.Controller) uint64 { return instanceOf(c).gen }

// restarting is the instance being reloaded, so the new one can find its parent.
var restarting struct {
	sync.Mutex
	parent *instance
}

// Hook registers start as an OnStartup hook and stop as an OnShutdown hook of the instance c
// sets up. stop runs only when start succeeded, once: at the instance's shutdown, or when a reload
// that started it fails.
func Hook(c *caddy.Controller, start, stop func() error) {
	in := instanceOf(c)
	var (
		once    sync.Once
		running bool
		mu      sync.Mutex
	)
	stopOnce := func() error {
		var err error
		once.Do(func() {
			mu.Lock()
			ran := running
			mu.Unlock()
			if ran {
				err = stop()
			}
		})
		return err
	}
	c.OnStartup(func() error {
		if err := start(); err != nil {
			return err
		}
		mu.Lock()
		running = true
		mu.Unlock()
		in.mu.Lock()
		in.started = append(in.started, stopOnce)
		in.mu.Unlock()
		return nil
	})
	c.OnShutdown(stopOnce)
}

func instanceOf(c *caddy.Controller) *instance {
	if in, ok := c.Get(instanceKey{}).(*instance); ok {
		return in
	}
	in := &instance{gen: generations.Add(1)}
	c.Set(instanceKey{}, in)
	restarting.Lock()
	if p := restarting.parent; p != nil {
		p.mu.Lock()
		p.children = append(p.children, in)
		p.mu.Unlock()
		restarting.parent = nil
	}
	restarting.Unlock()
	c.OnRestart(in.restart)
	c.OnRestartFailed(in.restartFailed)
	c.OnShutdown(in.shutdown)
	return in
}

// watch is the caddy event hook of lifecycle, called when an instance has started, at process
// start or at the end of a successful reload. Every instance, Corefile without our plugins
// included, gets the restart hooks that instanceOf gives those set up with them, so a failed
// reload from it abandons what its new instance started. The hooks are added after the instance
// started: caddy reads them when it restarts the instance, later. (A SIGUSR1 reload clears
// caddy's event hooks, so after one an instance without our plugins goes unwatched.)
func watch(event caddy.EventName, info any) error {
	inst, ok := info.(*caddy.Instance)
	if event != caddy.InstanceStartupEvent || !ok {
		return nil
	}
	restarting.Lock()
	restarting.parent = nil // a reload that set it is over
	restarting.Unlock()
	inst.StorageMu.Lock()
	_, ours := inst.Storage[instanceKey{}].(*instance)
	in := &instance{}
	if !ours {
		inst.Storage[instanceKey{}] = in
	}
	inst.StorageMu.Unlock()
	if !ours {
		inst.OnRestart = append(inst.OnRestart, in.restart)
		inst.OnRestartFailed = append(inst.OnRestartFailed, in.restartFailed)
		// First: caddy stops running shutdown hooks at the first error, and then calls
		// OnRestartFailed although the new instance serves.
		inst.OnShutdown = append([]func() error{in.shutdown}, inst.OnShutdown...)
	}
	return nil
}

func init() { caddy.RegisterEventHook("coresteer-lifecycle", watch) }

// restart runs before a reload of in: the instance the reload sets up is its child.
func (in *instance) restart() error {
	restarting.Lock()
	restarting.parent = in
	restarting.Unlock()
	return nil
}

// restartFailed runs when a reload of in failed: what its child started is stopped.
func (in *instance) restartFailed() error {
	restarting.Lock()
	if restarting.parent == in {
		restarting.parent = nil
	}
	restarting.Unlock()
	in.abandonChildren()
	return nil
}

// shutdown marks in as going down. caddy also calls OnRestartFailed when the new instance serves
// but one of the old one's shutdown hooks returned an error: then in is going down and its child
// must live.
func (in *instance) shutdown() error {
	in.mu.Lock()
	in.down = true
	in.mu.Unlock()
	return nil
}

// abandonChildren stops, newest first, what the failed reloads of in had started.
func (in *instance) abandonChildren() {
	in.mu.Lock()
	children, down := in.children, in.down
	in.children = nil
	in.mu.Unlock()
	if down {
		return
	}
	for _, ch := range children {
		ch.mu.Lock()
		stops := ch.started
		ch.started = nil
		ch.mu.Unlock()
		for _, stop := range slices.Backward(stops) {
			_ = stop()
		}
	}
}
