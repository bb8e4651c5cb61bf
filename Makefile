# The README's commands: `make test` runs every check CI runs; `make bench`
# prints the performance figures beside their baselines (docs/performance.md).
GO ?= go

.PHONY: test check generate generate-check vet fmt-check unit unit-e2e unit-pkgs bench bench-models fuzz run deps deps-go deps-debian deps-node lint-contract python-install-check vendor-check systemd-check mutate mutants funclen

# The checks run in two stages: first the packages and the generated code
# (the later checks compile what generate-check may rewrite), then every
# other check at once beside the tests, which mostly wait on real processes
# (docs/testing.md has the phases and their times). Each target's output is
# printed together when it ends.
test:
	@$(MAKE) --no-print-directory -j3 deps
	@$(MAKE) --no-print-directory generate-check
	@$(MAKE) --no-print-directory -j8 --output-sync=target fmt-check vet lint-contract vendor-check python-install-check systemd-check unit-e2e unit-pkgs

# npm packages are pinned by each directory's package-lock.json.
NODE_DIRS = api/lint clients/typescript tests tests/mcp tests/pyright tests/realclients web/vendor

deps: deps-go deps-debian deps-node

deps-go:
	$(GO) mod download

deps-debian:
	./scripts/ensure-debian-packages.sh chromium=chromium,chromium-driver bwrap=bubblewrap python3=python3 py:ensurepip=python3-venv systemd-analyze=systemd

deps-node:
	./scripts/ensure-node-deps.sh $(NODE_DIRS)

# The UI's vendored xterm.js (web/vendor/xterm) is byte for byte the pinned
# npm package (web/vendor/package-lock.json); scripts/vendor-xterm.sh
# refreshes it.
vendor-check:
	./scripts/vendor-xterm.sh --check

# The contract passes Spectral's spectral:oas with no finding at all and
# Redocly's recommended ruleset with no error and no warning.
lint-contract:
	cd api/lint && node lint.mjs

# `pip install ./clients/python` works with no package index: into a fresh
# venv with --no-index, then the client is imported from outside the tree.
python-install-check:
	./scripts/check-python-install.sh

# The Go server code and the TypeScript client's types are both generated
# from api/openapi.yaml (the latter needs make deps first).
generate:
	$(GO) generate ./...
	@test -x clients/typescript/node_modules/.bin/openapi-typescript || { echo "run make deps first: clients/typescript needs its npm packages" >&2; exit 1; }
	cd clients/typescript && node_modules/.bin/openapi-typescript ../../api/openapi.yaml -o src/schema.d.ts

# The systemd unit of examples/systemd passes `systemd-analyze verify` with
# no warning (ExecStart pointed at a dshd built by the documented go build),
# and its sysusers file makes the unit's user; no systemd needs to run.
systemd-check:
	./scripts/check-systemd-unit.sh

# Fails when the committed generated code differs from what the contract makes.
generate-check: generate
	@git diff --exit-code -- '*.gen.go' clients/typescript/src/schema.d.ts || { echo "generated code is stale: run make generate and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- '*.gen.go')" || { echo "generated files are not committed" >&2; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt would change: $$out" >&2; exit 1; }

vet:
	$(GO) vet ./...

# The end-to-end tests (./tests) are the longest package: unit-e2e starts
# them at once instead of after every other package, and lets their
# parallel tests (each its own server, home and port; they mostly wait on
# processes, timeouts and elections, not on the CPU) run 16 at a time.
# Tests that measure timing or load stay serial (no t.Parallel).
unit: unit-e2e unit-pkgs

unit-e2e:
	$(GO) test -race -count=1 -parallel 16 -timeout 20m ./tests

# One package at a time (-p 1): the other packages' tests all end well
# before ./tests, and the fewer processes beside its serial timing tests
# (crashes, partitions, limits), the less their deadlines depend on the
# machine.
unit-pkgs:
	$(GO) test -race -count=1 -p 1 -timeout 20m $$($(GO) list ./... | grep -v '/tests$$')

# In-process figures, then the real binary over loopback HTTP: latency and
# throughput over many requests, the heavy loads once each.
bench: bench-models
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./internal/shellenv ./internal/exec ./internal/agents
	$(GO) test -run '^$$' -bench 'TerminalEcho' -benchtime 2000x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'Stream256MiB' -benchtime 3x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'OutputSlowClient|OutputFollowers50' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'BackgroundSleeps(1000|5000)' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'CrashRecovery50' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'Files1GiB|FilesTar10000' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ReadFile2000' -benchtime 300x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'WorkspaceFork' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ExecWhileDiff' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'Checkpoints' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'Checkpoint$$' -benchtime 200x -count=1 -timeout 30m ./internal/workspace
	$(GO) test -run '^$$' -bench 'ClusterRegistry|ClusterExecForwarded' -benchtime 200x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ClusterSSEForwarded' -benchtime 3x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ClusterReady10000' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ClusterNATSCrash' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ClusterCutHeal' -benchtime 1x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'TranscriptAppend' -benchtime 300x -count=1 -timeout 30m ./internal/cluster
	$(GO) test -run '^$$' -bench 'AgentStoreOpen500' -benchtime 5x -count=1 -timeout 30m ./internal/cluster

# The figures of the paths a model's call takes (docs/performance.md, "Where
# models and harnesses feel it"), each beside its baseline and floor: the
# first part of `make bench`, and alone a run short enough to repeat.
bench-models:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./internal/sandbox
	$(GO) test -run '^$$' -bench SpawnFreshGroup -benchtime 400x -count=1 -timeout 30m ./internal/cgroup
	$(GO) test -run '^$$' -bench 'ExecStages|ToolStages' -benchtime 1000x -count=1 -v -timeout 30m ./internal/http
	$(GO) test -run '^$$' -bench 'ExecForeground|ExecConcurrent8|Declarations10000|MCPBash|ManyAgents' -benchtime 1000x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ExecSandbox' -benchtime 200x -count=1 -timeout 30m ./tests
	$(GO) test -run '^$$' -bench 'ProxyConnect|ProxyThroughput' -count=1 -timeout 30m ./internal/netallow
	$(GO) test -run '^$$' -bench 'OutputDelivery256MiB' -benchtime 3x -count=1 -timeout 30m ./tests

# The schema-driven contract fuzz test (TestContractFuzz, which `make test`
# runs with seed 1 and 600 requests), longer and with a fresh seed; the seed
# is printed, and FUZZ_SEED=n replays a run.
FUZZ_COUNT ?= 20000
FUZZ_SEED ?= $(shell date +%s)
fuzz:
	$(GO) test -race -count=1 -timeout 60m -v -run '^TestContractFuzz$$' ./cmd/dshd -args -contract.count=$(FUZZ_COUNT) -contract.seed=$(FUZZ_SEED)

run:
	$(GO) run ./cmd/dshd

# Hand-written mutants of the invariants that matter most (workspace apply,
# the network allowlist, the UI's login), each of which a named package test
# must catch; minutes, not part of `make test`. MUTANTS="W1 N4" runs some.
mutants:
	./scripts/mutants.py $(MUTANTS)

# Lists the hand-written functions over 60 lines, longest first, and fails
# for one over 80 (TestFuncLen; tests/funclen_test.go names the few being
# split now). `make test` runs it with the other tests.
funclen:
	$(GO) test -count=1 -run '^TestFuncLen$$' -v ./tests

# Mutation testing (gremlins, pinned) of the security-critical code: the
# sandbox's policy rules, plan and .git search, the job environment's
# managed/ambient/token rules, the registry, the child-bounds rule, the
# network allowlist (entries, matcher, address rules, the proxy's
# decisions), the UI's login codes and sessions, and the workspaces'
# all-or-nothing apply (apply.go: what it reads, through no link, and
# where it writes). Each mutant reruns its package's tests, so this is
# slow (tens of minutes) and not part of `make test`. Survivors are listed
# in docs/testing.md; MUTATE_PKGS runs a subset (MUTATE_PKGS=workspace).
GREMLINS = $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
MUTATE_PKGS ?= sandbox exec run shellenv netallow uiauth workspace
mutate:
	@for p in $(MUTATE_PKGS); do \
	  case $$p in \
	    sandbox) ex='-E (^|/)(ns_linux|bwrap|seccomp|host)\.go$$' ;; \
	    exec) ex='-E (^|/)[^e/][^/]*\.go$$ -E (^|/)e[^n/][^/]*\.go$$' ;; \
	    run) ex='-E (^|/)(call|service|stdin)\.go$$' ;; \
	    netallow) ex='-E (^|/)netallowtest/' ;; \
	    workspace) ex='-E (^|/)(workspace|changes|checkpoint|diff|ops|overlay_linux|beneath_linux|linux_only)\.go$$' ;; \
	    *) ex='' ;; \
	  esac; \
	  echo "== internal/$$p"; $(GREMLINS) unleash --workers 1 --timeout-coefficient 10 $$ex ./internal/$$p || exit 1; \
	done
