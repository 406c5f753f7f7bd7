# opledger's developer commands. `make test` is the one test command (CI runs
# it through .ci/run); `make dev` runs the local demo.

SHELL := /bin/bash
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

# Pinned code generators (see also tools/package.json, tools/requirements.txt).
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
SQLC_VERSION               := v1.31.1
GRPCURL_VERSION            := v1.9.3
# Java generators from Maven Central. protoc's version must equal protobuf-java's
# in clients/java/pom.xml (and matches the libprotoc of grpcio-tools: 35.1).
PROTOC_JAVA_VERSION          := 4.35.1
PROTOC_GEN_GRPC_JAVA_VERSION := 1.83.1
MAVEN_DEPENDENCY_PLUGIN      := org.apache.maven.plugins:maven-dependency-plugin:3.11.0

BUF := tools/node_modules/.bin/buf

.PHONY: all dev build test test-go test-clients test-outside client-typescript mcp-venv fuzz tools grpcurl generate check-generated lint clean

all: build

build:
	go build -o bin/opledger ./cmd/opledger

## dev: the local demo (bin/opledger dev; DEV_FLAGS are added to its flags). The binary is built
## and run by itself, not by `go run`: the go command exits 1 when it is interrupted, so Ctrl-C
## ended a clean stop with "make: *** [Makefile:…: dev] Error 1" (TestMakeDevInterruptIsClean).
DEV_FLAGS ?=
dev: build
	bin/opledger dev $(DEV_FLAGS)

## test: every test suite, against real PostgreSQL (a throwaway cluster is
## started when DATABASE_URL is not set).
test: test-go test-clients

# GO_MODULES are the nested Go modules (a module of their own each, see
# docs/clients/go.md): `./...` at the root does not descend into them.
GO_MODULES := clients/go gen/go

## test-go: the server's module, then the nested modules (the Go client's
## tests against a server are skipped here; clients/test.sh runs them). The
## failpoints package's own tests exist only in the chaos build (-tags
## failpoints): its crash points, and the decorators it installs.
test-go: mcp-venv
	go test -count=1 ./...
	go test -count=1 -tags failpoints ./proof/failpoint/
	cd clients/go && go test -count=1 ./...

## mcp-venv: the Python `mcp` package (PyPI, pinned in
## internal/mcpgateway/testdata/requirements.txt) in bin/mcp-venv, for the MCP
## gateway's tests with a Python MCP client.
mcp-venv: bin/mcp-venv/.installed
bin/mcp-venv/.installed: internal/mcpgateway/testdata/requirements.txt
	python3 -m venv bin/mcp-venv
	bin/mcp-venv/bin/pip install -q --disable-pip-version-check -r internal/mcpgateway/testdata/requirements.txt
	touch $@

## test-clients: the Python, TypeScript, Go and Java client suites and their
## examples, against one throwaway server (clients/test.sh).
test-clients:
	clients/test.sh

## test-outside: each client installed the way docs/clients/*.md says, and each framework adapter
## the way docs/integrations/*.md says, in a scratch project outside the repository, running its
## quick start against a real server (one charge, and one typed error or the model's answer); CI
## runs it after `make test` (clients/outside-test.sh).
test-outside:
	clients/outside-test.sh

## client-typescript: the TypeScript client as an npm tarball for other projects
## (clients/typescript/opledger-client-VERSION.tgz; docs/clients/typescript.md installs it).
client-typescript:
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm pack --loglevel=error

## fuzz: a short run of every fuzz target. Budgets are execution counts, not
## durations: a duration-based -fuzztime races the fuzz coordinator's own
## deadline on a busy machine and fails with a bare "context deadline exceeded"
## and no failing input (go.dev/issue/75804, fixed only in Go 1.27). Each count
## is about five seconds on two idle cores; FUZZSCALE multiplies them.
FUZZSCALE ?= 1
fuzz:
	cd clients/go && go test ./fingerprint -run='^$$' -fuzz='^FuzzCanonicalize$$' -fuzztime=$$((50000*$(FUZZSCALE)))x
	cd clients/go && go test ./fingerprint -run='^$$' -fuzz='^FuzzCompareUTF16$$' -fuzztime=$$((200000*$(FUZZSCALE)))x
	go test ./interceptors -run='^$$' -fuzz='^FuzzValidateKey$$' -fuzztime=$$((30000*$(FUZZSCALE)))x
	go test ./tool -run='^$$' -fuzz='^FuzzValidateArgs$$' -fuzztime=$$((30000*$(FUZZSCALE)))x
	go test ./tool -run='^$$' -fuzz='^FuzzQuickSchemaAgrees$$' -fuzztime=$$((60000*$(FUZZSCALE)))x
	go test ./server -run='^$$' -fuzz='^FuzzRequestPath$$' -fuzztime=$$((4000*$(FUZZSCALE)))x
	go test ./server -run='^$$' -fuzz='^FuzzJSONStruct$$' -fuzztime=$$((20000*$(FUZZSCALE)))x
	go test ./store -run='^$$' -fuzz='^FuzzStorableIsStored$$' -fuzztime=$$((20000*$(FUZZSCALE)))x
	go test ./server -run='^$$' -fuzz='^FuzzChecksMatchTheirForms$$' -fuzztime=$$((20000*$(FUZZSCALE)))x
	go test ./server -run='^$$' -fuzz='^FuzzStructField$$' -fuzztime=$$((100000*$(FUZZSCALE)))x
	go test ./executor -run='^$$' -fuzz='^FuzzExtractPath$$' -fuzztime=$$((500000*$(FUZZSCALE)))x

## grpcurl: only grpcurl, into .bin, for the README's session (about 1.5 min
## with an empty Go cache; `make tools` builds every generator and takes several).
grpcurl: $(BIN)/grpcurl

## tools: install the pinned generators and linters into .bin, tools/ and .venv.
tools: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/sqlc $(BIN)/grpcurl $(BIN)/protoc-java $(BIN)/protoc-gen-grpc-java tools/node_modules/.installed .venv/.installed

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/sqlc:
	GOBIN=$(BIN) go install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
$(BIN)/grpcurl:
	GOBIN=$(BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
# Java: protoc (grpcio-tools' protoc has no java generator) and grpc-java's plugin,
# both native executables published on Maven Central.
$(BIN)/protoc-java:
	$(call maven-exe,com.google.protobuf:protoc:$(PROTOC_JAVA_VERSION),protoc-$(PROTOC_JAVA_VERSION))
$(BIN)/protoc-gen-grpc-java:
	$(call maven-exe,io.grpc:protoc-gen-grpc-java:$(PROTOC_GEN_GRPC_JAVA_VERSION),protoc-gen-grpc-java-$(PROTOC_GEN_GRPC_JAVA_VERSION))
# maven-exe: copy the linux-x86_64 `exe` artifact $(1) (file name $(2)-linux-x86_64.exe) to $@.
define maven-exe
	rm -rf $@.d
	mvn -q -B $(MAVEN_DEPENDENCY_PLUGIN):copy -Dartifact=$(1):exe:linux-x86_64 -DoutputDirectory=$@.d
	install -m 0755 $@.d/$(2)-linux-x86_64.exe $@
	rm -rf $@.d
endef
tools/node_modules/.installed: tools/package.json tools/package-lock.json
	cd tools && npm ci --no-audit --no-fund
	touch $@
.venv/.installed: tools/requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install -q -r tools/requirements.txt
	touch $@

## generate: regenerate gen/ (buf, local plugins) and store/internal/db (sqlc).
generate: tools
	$(BUF) generate
	$(BIN)/sqlc generate

## check-generated: fail if generated code differs from what is committed.
check-generated: generate
	@git status --porcelain -- gen store/internal/db | grep . && { echo "generated code drifted: run 'make generate' and commit"; git diff --stat -- gen store/internal/db; exit 1; } || echo "generated code is up to date"

## lint: buf lint, format and breaking-change check against main; gofmt; go vet
## and a tidy go.mod in every Go module.
lint: tools
	$(BUF) lint
	$(BUF) format -d --exit-code
	@if git rev-parse --verify -q main >/dev/null; then $(BUF) breaking --against '.git#branch=main'; else echo "no main branch: skipping buf breaking"; fi
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@for m in $(GO_MODULES); do (cd $$m && go vet ./... && go mod tidy -diff) || { echo "$$m: go vet or go mod tidy failed"; exit 1; }; done

clean:
	rm -rf bin .bin .venv tools/node_modules
