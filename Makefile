# coresteer: CoreDNS with the routingpolicy, outbound, healthcheck and pschealth plugins.

GO          ?= go
BIN         := bin/coredns
SLIM        := bin/coredns-slim
TOOLS       := $(CURDIR)/bin/tools
PORT        ?= 1053
VERSION     := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X github.com/coresteer/coresteer/plugin/pkg/version.Version=$(VERSION)
GOLANGCI    := $(TOOLS)/golangci-lint
GOLANGCI_V  := v2.15.0
TEST_FLAGS  ?= -race -timeout 20m

.PHONY: build build-slim run test vet lint unit fuzz bench bench-go demo clean

## build: the custom coredns binary, at bin/coredns.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/coredns

## build-slim: the cluster-DNS build (cmd/coredns-slim/plugin.cfg), at bin/coredns-slim.
build-slim:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(SLIM) ./cmd/coredns-slim

## run: build, then serve Corefile.example on 127.0.0.1:$(PORT) (no root needed).
run: build
	$(BIN) -conf Corefile.example

## test: vet, lint, then every test with the race detector (README snippets included).
test: vet lint unit

vet:
	$(GO) vet ./...

unit:
	$(GO) test $(TEST_FLAGS) ./...

## fuzz: every fuzz target of ./plugin/..., one at a time, for $(FUZZTIME) each (FUZZTIME=30m make
## fuzz); what the fuzzer finds is kept in each package's testdata/fuzz/FuzzX/, which plain
## `go test` (make test) runs. See FUZZING.md.
FUZZTIME    ?= 1m
fuzz:
	FUZZTIME=$(FUZZTIME) test/fuzz ./plugin/...

## lint: golangci-lint v2 with a configuration close to CoreDNS's own.
lint: $(GOLANGCI)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_V)

## bench: the side-by-side benchmarks, short version (about 8 minutes; installs dnsperf and the
## peers with apt-get, so it needs root). bench/run is the full run into bench/RESULTS.md.
bench:
	bench/run --short --out bench/out/RESULTS-short.md

## bench-go: the Go benchmarks of every hot path, short.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2000x ./...

clean:
	rm -rf bin

## demo: start local backends and resolvers, serve Corefile.example, and walk through failover.
demo: build
	$(GO) run ./demo -coredns $(BIN) -conf Corefile.example
