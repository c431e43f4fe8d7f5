// Package version names the coresteer suite and its version, for `coredns -version` and logs.
package version

// Version is the suite's version; `make build` sets it from git with -ldflags.
var Version = "0.1.0-dev"

// Name is the suite's name.
const Name = "coresteer"

// String returns "coresteer VERSION".
func String() string { return Name + " " + Version }
