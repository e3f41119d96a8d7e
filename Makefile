# agentbus — every task a newcomer needs (README "Quick start"). `make run`
# needs only Go (go.mod's version); `make test` also uses bash and curl (the
# README walk-throughs), node and npm with the npm registry (interop
# validators, the console's browser test) and, when present, apt-get as root
# (old nats-server, chromium).
GO      ?= go
PKGS    := ./...
BIN     := bin/agentbus
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/agentbus/agentbus/pkg/server.Version=$(VERSION) -X github.com/agentbus/agentbus/pkg/server.Commit=$(COMMIT)

.PHONY: run build image test fuzz lint bench soak clean old-nats-server chromium screenshots

## run: build bin/agentbus and start it with embedded NATS on http://127.0.0.1:8080 (data in ./data);
##      ARGS are flags for agentbus serve, e.g. make run ARGS="--listen 127.0.0.1:9090"
# agentbus replaces the recipe's shell (exec), so it is make's own child:
# the SIGTERM make passes on to its children (kill <make's pid>, kill %1)
# reaches it. go run would not pass it on.
ARGS ?=
run: build
	exec $(BIN) serve $(ARGS)

## build: build bin/agentbus
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agentbus

## image: build the container image of deploy/Dockerfile without a Docker daemon,
##        as bin/agentbus-image.tar for docker load -i (IMAGE_ARCH, IMAGE_TAG)
IMAGE_ARCH ?= amd64
IMAGE_TAG  ?= agentbus:$(VERSION)
image:
	mkdir -p bin
	cd test/deploy && $(GO) run ./cmd/agentbus-image -root ../.. -o ../../bin/agentbus-image.tar \
		-arch $(IMAGE_ARCH) -tag '$(IMAGE_TAG)' -version '$(VERSION)'

## test: vet, layering check, unit + end-to-end tests, the deployment checks
##       (test/deploy, a module of its own), a short fuzz run
test: lint old-nats-server chromium
	npm ci --prefix test/interop --no-audit --no-fund
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(GO) test -count=1 -timeout 10m -run 'TestBoundedWhileReceiversAreDown' ./pkg/webhook
	cd test/deploy && $(GO) test -count=1 -timeout 20m ./...
	$(MAKE) fuzz

## old-nats-server: install Debian's nats-server 2.9 for test/oldserver (which skips without it)
old-nats-server:
	@if [ -x /usr/sbin/nats-server ]; then :; \
	elif ! command -v apt-get >/dev/null; then echo "apt-get unavailable: old-server test will skip"; \
	elif ! { apt-get update -qq && apt-get install -y -qq nats-server; }; then echo "apt-get install nats-server failed (not root?): old-server test will skip"; \
	else systemctl disable --now nats-server 2>/dev/null; service nats-server stop 2>/dev/null; true; fi

## chromium: install Debian's chromium for the console's browser test (test/interop, which skips without it)
chromium:
	@if command -v chromium >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then echo "apt-get unavailable: the console's browser test will skip"; \
	elif ! { apt-get update -qq && apt-get install -y -qq chromium; }; then echo "apt-get install chromium failed (not root?): the console's browser test will skip"; \
	fi

## screenshots: run the console's browser tests with their screenshots written to docs/screenshots (docs/console.md shows them)
screenshots: chromium
	npm ci --prefix test/interop --no-audit --no-fund
	cd test/interop && AGENTBUS_CONSOLE_ARTIFACTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -run 'Console.*InBrowser' .

## fuzz: short fuzz runs of the envelope decoder, its splitter, the token syntaxes, the JSON value decoder, credential parsing, the webhook URL rules, and the on-disk receipt and event-copy decoders
# Fuzz budgets are counts of executions (55-80 s in all on 2 cores), not
# durations: Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" at the end of a -fuzztime duration on a busy
# machine (golang/go#75804, fixed in Go 1.27); a count has no deadline.
fuzz:
	$(GO) test ./pkg/envelope -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 300000x
	$(GO) test ./pkg/envelope -run '^$$' -fuzz FuzzSplit -fuzztime 600000x
	$(GO) test ./pkg/envelope -run '^$$' -fuzz FuzzSyntax -fuzztime 500000x
	$(GO) test ./pkg/envelope -run '^$$' -fuzz FuzzDecodeValue -fuzztime 300000x
	$(GO) test ./pkg/auth -run '^$$' -fuzz FuzzParseCredential -fuzztime 400000x
	$(GO) test ./pkg/egress -run '^$$' -fuzz FuzzCheckURL -fuzztime 200000x
	$(GO) test ./pkg/projection -run '^$$' -fuzz FuzzReadReceipt -fuzztime 300000x
	$(GO) test ./pkg/projection -run '^$$' -fuzz FuzzReadEventCopy -fuzztime 100000x

## lint: gofmt, go vet, and the dependency rule (see docs/architecture.md)
lint:
	@test -z "$$(gofmt -l cmd pkg streams config test)" || { gofmt -l cmd pkg streams config test; echo "gofmt needed"; exit 1; }
	$(GO) vet $(PKGS)
	cd test/deploy && $(GO) vet ./...
	@./.ci/layering

## bench: ingest and command→event latency beside the bare reference, in one run
bench:
	$(GO) run ./test/bench

## soak: agentbus as make run starts it, under SOAK_RATE PlaceOrder commands/s (each a new order)
##       for SOAK_MINUTES: p50/p99 command -> event on the live SSE feed and RSS, minute by minute
SOAK_RATE    ?= 2000
SOAK_MINUTES ?= 30
soak: build
	$(GO) run ./test/bench -only soak -soak-agentbus $(BIN) -soak-rate $(SOAK_RATE) -soak-minutes $(SOAK_MINUTES)

clean:
	rm -rf bin data
