# Every target that needs PostgreSQL runs through scripts/with-postgres: DATABASE_URL when set,
# else the server on 127.0.0.1:5432, else a private throwaway cluster.
GO ?= go
WITH_PG := scripts/with-postgres
STATICCHECK_VERSION := v0.8.2
ERRORLINT_VERSION := v1.9.1

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

.PHONY: test
test: ## Run every test with the race detector against a real PostgreSQL.
	$(WITH_PG) $(GO) test -race -count=1 -timeout 15m ./...

.PHONY: demo
demo: ## Run the main job on the embedded default event stream.
	$(WITH_PG) $(GO) run ./cmd/ordered demo

.PHONY: bench
bench: ## Run the benchmark suite (ordered bench; about 15 minutes).
	$(WITH_PG) $(GO) run ./cmd/ordered bench

.PHONY: gobench
gobench: ## Run the Go benchmarks of the enqueue, claim+complete, batched claim+complete and completion-claims-next paths and of a worker's drain (for benchstat).
	$(WITH_PG) $(GO) test -run '^$$' -bench . -benchmem ./ordered/

.PHONY: uibench
uibench: ## Time every dashboard page over a generated queue of 1,000,000 jobs (ORDERED_UI_BENCH_KEEP=1 keeps it).
	$(WITH_PG) $(GO) test -run '^$$' -bench Pages -benchtime 20x ./ordered/orderedui/

.PHONY: verify
verify: ## The full chaos run (4 runs of 200 keys x 25 events through injected faults; a few minutes).
	$(GO) run ./cmd/ordered verify

.PHONY: verify-hosts
verify-hosts: ## The chaos run with worker processes on 3 hosts (network namespaces; needs root): slow links, partitions.
	$(GO) run ./cmd/ordered verify --hosts 3

.PHONY: lint
lint: ## gofmt, go vet, staticcheck and errorlint (the linters come pinned through the Go module proxy).
	@test -z "$$(gofmt -l .)" || (gofmt -l . && echo 'gofmt: the files above need formatting' && exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run codeberg.org/polyfloyd/go-errorlint@$(ERRORLINT_VERSION) ./...
