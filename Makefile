# The README's commands: `make test` runs every check CI runs; `make bench`
# prints the performance figures beside their baselines.
GO ?= go

.PHONY: test check generate generate-check vet fmt-check unit bench run deps

test: deps generate-check fmt-check vet unit

deps:
	$(GO) mod download
	./scripts/ensure-chromium.sh

generate:
	$(GO) generate ./...

# Fails when the committed generated code differs from what the contract makes.
generate-check: generate
	@git diff --exit-code -- '*.gen.go' || { echo "generated code is stale: run make generate and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- '*.gen.go')" || { echo "generated files are not committed" >&2; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt would change: $$out" >&2; exit 1; }

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./internal/shellenv ./internal/exec
	$(GO) test -run '^$$' -bench . -benchtime 2000x -count=1 -timeout 30m ./tests

run:
	$(GO) run ./cmd/server
