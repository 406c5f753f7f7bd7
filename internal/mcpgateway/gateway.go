// Package mcpgateway is `opledger mcp`: a Model Context Protocol server
// (the official go-sdk, over stdio or streamable HTTP) in front of the
// ledger's gRPC service. It lists the ledger's tools (ListTools) as MCP tools
// and turns each tools/call into Prepare, under an idempotency key the host
// gives or the gateway derives, and Execute with a bounded wait, answering
// from the operation's recorded state. It is a thin client of the gRPC
// service with an agent key: every rule (argument schemas, approvals, at most
// one effect) stays in the ledger. See docs/mcp.md.
package mcpgateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// CheckOperationTool is the name of the gateway's own tool that reports an
// operation's outcome by id (and completes an approved one).
const CheckOperationTool = "check_operation"

// Defaults of Options.
const (
	DefaultWait           = 20 * time.Second
	DefaultCallTimeout    = 90 * time.Second
	DefaultSessionTimeout = 24 * time.Hour
)

// Options tunes a Gateway.
type Options struct {
	// Wait is ExecuteRequest.wait: how long a call waits for the outcome of
	// an operation another caller is executing (the server caps it).
	// DefaultWait when 0.
	Wait time.Duration
	// CallTimeout bounds one tools/call from Prepare to the answer, retries
	// included. DefaultCallTimeout when 0. A call cut short answers that the
	// operation is pending, never that it failed.
	CallTimeout time.Duration
	// SessionTimeout closes a streamable HTTP session idle this long; its
	// derived idempotency keys go with it. DefaultSessionTimeout when 0.
	SessionTimeout time.Duration
	// Version is reported as the MCP server's version.
	Version string
	// Logger receives JSON logs (never arguments or raw keys); stdio mode
	// must not log to standard output. The gateway adds "component" to
	// every line ("mcp" for its own, "go-sdk" for the SDK's), so Logger
	// must not carry one (slog would write the key twice).
	Logger *slog.Logger
}

// Gateway is one MCP server in front of one ledger and agent key. It is
// safe for concurrent sessions.
type Gateway struct {
	ledger   *client.Client
	opts     Options
	log      *slog.Logger // the gateway's own lines: component "mcp"
	sdkLog   *slog.Logger // the go-sdk's lines: component "go-sdk"
	server   *mcp.Server
	sessions *sessionKeys
	tools    []*opledgerv1.Tool
}

// instructions tells the model how to read the gateway's answers.
const instructions = `These tools run through opledger, an execution ledger: each call is recorded once and performed at most once.
Every answer has a "status" in its structured content:
- "succeeded": done; "result" is the downstream's answer.
- "awaiting_approval": recorded but NOT done; a person must approve it. Tell the user, then call check_operation with the operation_id to run it once approved.
- "outcome_unknown" or "executing" or "pending": it may have taken effect. Do NOT retry it, with the same or other arguments; call check_operation with the operation_id later. A "pending" answer without an operation_id: do what its "next" says.
- "failed": the downstream refused; nothing happened.
- "rejected" / "cancelled": a person denied or withdrew it; nothing happened.
- "error": opledger refused the call; nothing happened unless an operation_id is given.
An answer with "edited": an approver changed the arguments before approving. "edited.args" is what ran (or awaits approval), as the answer's operation_id; the call as you made it never runs. Report that, not the arguments you sent.
Repeating a call with the same arguments in this session returns the same operation, never a second effect.`

// New lists the ledger's tools (ListTools, with the agent key) and builds
// the MCP server. It fails when the ledger cannot be reached or refuses the
// key, so that a misconfigured gateway stops at once instead of offering no
// tools.
func New(ctx context.Context, ledger *client.Client, opts Options) (*Gateway, error) {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	resp, err := ledger.ListTools(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the ledger's tools: %w", err)
	}
	g := &Gateway{ledger: ledger, opts: opts, log: log.With("component", "mcp"), sdkLog: log.With("component", "go-sdk"),
		sessions: newSessionKeys()}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "opledger", Title: "opledger MCP gateway", Version: opts.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: g.sdkLog})
	for _, t := range resp.GetTools() {
		if !t.GetCurrent() {
			continue
		}
		if t.GetName() == CheckOperationTool {
			return nil, fmt.Errorf("the ledger has a tool named %q, which is the gateway's own tool; rename it in the tools file", CheckOperationTool)
		}
		mt, err := mcpTool(t)
		if err != nil {
			return nil, err
		}
		g.server.AddTool(mt, g.toolHandler(t))
		g.tools = append(g.tools, t)
	}
	g.server.AddTool(checkOperationTool(), g.checkOperation)
	return g, nil
}

// Server is the MCP server, for any go-sdk transport.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Tools are the ledger tools the gateway offers (each name's current
// version).
func (g *Gateway) Tools() []*opledgerv1.Tool { return g.tools }

// ServeStdio serves one MCP session over standard input and output until
// the client closes it or ctx ends.
func (g *Gateway) ServeStdio(ctx context.Context) error {
	err := g.server.Run(ctx, &mcp.StdioTransport{})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// HTTPHandler serves the streamable HTTP transport (stateful sessions, so
// that derived keys have a session to belong to; a bounded in-memory event
// store lets a client resume a response stream that broke). With a
// non-empty token every request must carry `Authorization: Bearer <token>`.
// Cross-origin browser requests are refused, and the go-sdk refuses
// requests to a loopback listener that name another host (DNS rebinding).
func (g *Gateway) HTTPHandler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &mcp.StreamableHTTPOptions{
		SessionTimeout: g.opts.SessionTimeout,
		EventStore:     mcp.NewMemoryEventStore(nil),
		Logger:         g.sdkLog,
	})
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(unnamedPrime{w}, r) })
	var next http.Handler = inner
	if token != "" {
		want := []byte("Bearer " + token)
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="opledger-mcp"`)
				http.Error(w, "unauthorized: send Authorization: Bearer <token>", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	return http.NewCrossOriginProtection().Handler(next)
}

// primeName is how the go-sdk (v1.8, and its main branch) begins the
// priming event it sends first on a response stream under protocol
// 2025-11-25 (SEP-1699): an event id with empty data, so that a client that
// loses the stream can resume it from there.
var primeName = []byte("event: prime\n")

// unnamedPrime writes the go-sdk's priming event without its name, as the
// specification describes it ("an event ID and an empty data field",
// 2025-11-25, transports §2.1.6), so it is an ordinary "message" event. The
// Python mcp client (2.3) reads only "message" events: it logged "Unknown
// SSE event: prime" for every request and dropped the event's id. The go-sdk
// client skips any event with empty data, named or not. Every other write
// (the go-sdk writes one event per Write) passes unchanged; Unwrap keeps
// flushing working (http.ResponseController).
type unnamedPrime struct{ http.ResponseWriter }

func (w unnamedPrime) Write(p []byte) (int, error) {
	if rest, ok := bytes.CutPrefix(p, primeName); ok && bytes.HasSuffix(rest, []byte("data: \n\n")) {
		if _, err := w.ResponseWriter.Write(rest); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap is the writer underneath, for http.ResponseController.
func (w unnamedPrime) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpTool describes a ledger tool to MCP clients: its JSON Schema as the
// input schema, annotations from its effect, and its policy's summary in
// the description (client.ModelDescription).
func mcpTool(t *opledgerv1.Tool) (*mcp.Tool, error) {
	schema := t.GetArgsSchema().AsMap()
	if typ := schema["type"]; typ != "object" {
		// The ledger's tools file requires it; a server that broke the rule
		// would make the go-sdk panic.
		return nil, fmt.Errorf("tool %q: its args schema has type %v; MCP tools take an object", t.GetName(), typ)
	}
	// The policy's summary, when short: what is refused and who must
	// approve, before the model calls.
	desc := client.ModelDescription(strings.TrimSpace(t.GetDescription()), t.GetPolicy().GetSummary())
	if t.GetApprovalRequired() {
		desc += "\n\nRequires a person's approval: the first call answers \"awaiting_approval\" with an operation_id and does nothing; once a person approved it, call check_operation with that operation_id to run it."
	}
	return &mcp.Tool{
		Name:        t.GetName(),
		Description: strings.TrimSpace(desc),
		InputSchema: schema,
		Annotations: Annotations(t.GetEffect()),
		Meta: mcp.Meta{
			"opledger/tool_version":      t.GetVersion(),
			"opledger/effect":            effectName(t.GetEffect()),
			"opledger/approval_required": t.GetApprovalRequired(),
			"opledger/policy_digest":     t.GetPolicy().GetDigest(),
		},
	}, nil
}

// Annotations are the MCP tool annotations of a tools-file effect:
// read_only → readOnlyHint; idempotent → idempotentHint (and not
// destructive); side_effect → destructiveHint. Every opledger tool calls a
// downstream service, so openWorldHint is true. Annotations only describe;
// the ledger enforces approvals and at-most-once whatever a client does
// with them.
func Annotations(e opledgerv1.Effect) *mcp.ToolAnnotations {
	yes, no := true, false
	a := &mcp.ToolAnnotations{OpenWorldHint: &yes}
	switch e {
	case opledgerv1.Effect_EFFECT_READ_ONLY:
		a.ReadOnlyHint = true
	case opledgerv1.Effect_EFFECT_IDEMPOTENT:
		a.IdempotentHint = true
		a.DestructiveHint = &no
	default: // side_effect, and anything a newer server may add
		a.DestructiveHint = &yes
	}
	return a
}

func effectName(e opledgerv1.Effect) string {
	return strings.ToLower(strings.TrimPrefix(e.String(), "EFFECT_"))
}
