// Package client is the Go client of opledger's LedgerService: typed errors,
// one bounded retry owner that always repeats the same idempotency key, the
// idempotency key derivation shared by every opledger client, the operation
// fingerprint, and ToolRunner, which runs one tool call of an agent end to end.
//
// It is a module of its own (github.com/opledger/opledger/clients/go) that
// depends only on the generated API (module github.com/opledger/opledger/gen/go),
// grpc, protobuf and genproto. Its fingerprint package is the one
// implementation of the v1 fingerprint; the server imports it. See
// docs/clients/go.md.
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// Client calls one opledger server with one API key. It is safe for
// concurrent use. Several clients (an agent's and an approver's key, say)
// can share a connection through WithAPIKey.
type Client struct {
	conn    *grpc.ClientConn // nil when the connection is not ours to close
	rpc     opledgerv1.LedgerServiceClient
	apiKey  string
	retry   RetryPolicy
	timeout time.Duration // of each attempt; 0: the context's deadline alone
}

// Option configures New.
type Option func(*config)

type config struct {
	tls       *tls.Config
	plaintext bool
	retry     RetryPolicy
	dialOpts  []grpc.DialOption
	timeout   *time.Duration
}

// DefaultTimeout is the deadline of each attempt of a call when WithTimeout
// does not set another, as in every opledger client: a call whose context
// has no deadline still ends when the network or the server stops
// answering.
const DefaultTimeout = 30 * time.Second

// waitMargin is how far beyond its wait the deadline of a call that asks
// the server to wait lies (Execute with WithWait, Prepare with WithExecute):
// the client must not give up on an answer the server is about to send.
const waitMargin = 10 * time.Second

// WithTimeout sets the deadline of each attempt of a call (DefaultTimeout
// when not given). The context's deadline, when earlier, still wins; a call
// that asks the server to wait gets at least its wait plus 10 s. Zero or
// less leaves calls to the context's deadline alone.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = &d }
}

func (c config) attemptTimeout() time.Duration {
	if c.timeout == nil {
		return DefaultTimeout
	}
	return max(*c.timeout, 0)
}

// WithPlaintext sends calls without TLS, for a server on loopback or behind a
// TLS-terminating sidecar. Without it the client uses TLS (the same default
// in every opledger client: plaintext only when the caller asks for it).
func WithPlaintext() Option { return func(c *config) { c.plaintext = true } }

// WithTLSConfig sets the TLS configuration (custom roots, client
// certificates). The default is the system roots.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithRetryPolicy replaces DefaultRetryPolicy.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithDialOptions adds grpc dial options (interceptors, keepalive, …). Do not
// re-enable grpc's retries: the client is the one retry owner.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// New connects to target (e.g. "127.0.0.1:50051" or "dns:///ledger:443")
// and authenticates every call with apiKey. Close releases the connection.
func New(target, apiKey string, opts ...Option) (*Client, error) {
	if apiKey == "" {
		return nil, errors.New("opledger: empty API key")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	creds := insecure.NewCredentials()
	if cfg.plaintext {
		if cfg.tls != nil {
			return nil, errors.New("opledger: WithPlaintext and WithTLSConfig exclude each other")
		}
	} else {
		tc := cfg.tls
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(tc)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithDisableRetry(),
		// Fixed windows the size of the largest message, as the server
		// sets them: this also turns off grpc-go's bandwidth-delay
		// estimation, a PING per answer for small unary calls.
		grpc.WithInitialWindowSize(maxMessageBytes), grpc.WithInitialConnWindowSize(maxMessageBytes)},
		cfg.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("opledger: connect %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: opledgerv1.NewLedgerServiceClient(conn), apiKey: apiKey, retry: cfg.retry.withDefaults(),
		timeout: cfg.attemptTimeout()}, nil
}

// maxMessageBytes is the server's bound on a message (server.MaxMessageBytes).
const maxMessageBytes = 1 << 20

// NewFromConn uses a connection the caller owns (Close leaves it open). The
// connection must have been created with grpc.WithDisableRetry() so that the
// client stays the only retry owner. Of the options, only WithTimeout
// applies: the others configure a connection, and this one is the caller's.
func NewFromConn(conn grpc.ClientConnInterface, apiKey string, policy RetryPolicy, opts ...Option) (*Client, error) {
	if apiKey == "" {
		return nil, errors.New("opledger: empty API key")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return &Client{rpc: opledgerv1.NewLedgerServiceClient(conn), apiKey: apiKey, retry: policy.withDefaults(),
		timeout: cfg.attemptTimeout()}, nil
}

// WithAPIKey returns a client that shares c's connection and retry policy
// but authenticates as another principal (e.g. the approver). Closing it
// does not close the connection; close c.
func (c *Client) WithAPIKey(apiKey string) *Client {
	return &Client{rpc: c.rpc, apiKey: apiKey, retry: c.retry, timeout: c.timeout}
}

// Close closes the connection New opened.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// PrepareOption tunes Prepare.
type PrepareOption func(*opledgerv1.PrepareRequest)

// WithToolVersion pins the tool version; by default the server uses the
// tool's current version (and reports it in Operation.tool_version).
func WithToolVersion(v string) PrepareOption {
	return func(r *opledgerv1.PrepareRequest) { r.ToolVersion = v }
}

// WithExecute makes Prepare also execute the operation in the same call, as
// an Execute right after it would (the one-call path for tools that need no
// approval): the answer is the operation as the execution left it, and
// ExecutionReplayed says that no downstream request was made because the
// outcome was recorded already. wait (0: none) is how long to wait when
// another caller is executing it, as WithWait. An operation that awaits
// approval comes back as without WithExecute (no error).
func WithExecute(wait time.Duration) PrepareOption {
	return func(r *opledgerv1.PrepareRequest) {
		r.Execute = true
		if wait > 0 {
			r.Wait = durationpb.New(wait)
		}
	}
}

// Prepare records a proposed tool call under idempotencyKey (see DeriveKey),
// or returns the operation already recorded under it with Replayed = true.
//
// args is the tool's arguments as a map[string]any, a *structpb.Struct, a
// json.RawMessage holding a JSON object, or nil for {}. Numbers travel as
// IEEE-754 doubles: send integers above 2^53 as strings. A number a double
// cannot carry as written (an integer above 2^53, more digits than a double
// holds) is refused before anything is sent (InexactNumber), in a map's
// integers and in JSON text, rather than changed on the way.
func (c *Client) Prepare(ctx context.Context, tool string, args any, idempotencyKey string, opts ...PrepareOption) (*opledgerv1.PrepareResponse, error) {
	if idempotencyKey == "" {
		return nil, errors.New("opledger: Prepare needs an idempotency key (see DeriveKey)")
	}
	s, err := toStruct(args)
	if err != nil {
		return nil, err
	}
	req := &opledgerv1.PrepareRequest{Tool: tool, Args: s}
	for _, o := range opts {
		o(req)
	}
	var resp *opledgerv1.PrepareResponse
	var wait time.Duration
	if req.GetExecute() {
		wait = req.GetWait().AsDuration()
	}
	err = c.call(ctx, idempotencyKey, wait, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Prepare(ctx, req)
		return err
	})
	return resp, err
}

// Approve records an approver's decision bound to the fingerprint the
// approver was shown (use CheckFingerprint to verify it against the args on
// screen first).
func (c *Client) Approve(ctx context.Context, operationID, fingerprint string, decision opledgerv1.Decision, reason string) (*opledgerv1.ApproveResponse, error) {
	req := &opledgerv1.ApproveRequest{OperationId: operationID, Fingerprint: fingerprint, Decision: decision, Reason: reason}
	var resp *opledgerv1.ApproveResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Approve(ctx, req)
		return err
	})
	return resp, err
}

// ExecuteOption tunes Execute.
type ExecuteOption func(*opledgerv1.ExecuteRequest)

// WithWait makes Execute wait up to d for the outcome when another caller is
// executing the operation (the server caps it, 30 s by default). Give the
// context a deadline longer than d.
func WithWait(d time.Duration) ExecuteOption {
	return func(r *opledgerv1.ExecuteRequest) { r.Wait = durationpb.New(d) }
}

// Execute performs the operation's effect at most once; a repeat returns
// the stored outcome with Replayed = true. Check Operation.State: SUCCEEDED,
// FAILED, OUTCOME_UNKNOWN (call Reconcile; never a new Prepare) or EXECUTING
// (pending).
func (c *Client) Execute(ctx context.Context, operationID string, opts ...ExecuteOption) (*opledgerv1.ExecuteResponse, error) {
	req := &opledgerv1.ExecuteRequest{OperationId: operationID}
	for _, o := range opts {
		o(req)
	}
	var resp *opledgerv1.ExecuteResponse
	err := c.call(ctx, "", req.GetWait().AsDuration(), func(ctx context.Context) (err error) {
		resp, err = c.rpc.Execute(ctx, req)
		return err
	})
	return resp, err
}

// GetOption tunes Get.
type GetOption func(*opledgerv1.GetRequest)

// WithEvents asks Get for the operation's event log too.
func WithEvents() GetOption { return func(r *opledgerv1.GetRequest) { r.IncludeEvents = true } }

// Get reads an operation (and, WithEvents, its event log).
func (c *Client) Get(ctx context.Context, operationID string, opts ...GetOption) (*opledgerv1.GetResponse, error) {
	req := &opledgerv1.GetRequest{OperationId: operationID}
	for _, o := range opts {
		o(req)
	}
	var resp *opledgerv1.GetResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Get(ctx, req)
		return err
	})
	return resp, err
}

// ReconcileOption tunes Reconcile.
type ReconcileOption func(*opledgerv1.ReconcileRequest)

// WithResolution sends an operator's manual verdict (STATE_SUCCEEDED with
// the downstream's reference, STATE_FAILED, or STATE_READY) instead of a
// downstream lookup. It needs the operator role.
func WithResolution(outcome opledgerv1.State, externalRef, note string) ReconcileOption {
	return func(r *opledgerv1.ReconcileRequest) {
		r.Resolution = &opledgerv1.Resolution{Outcome: outcome, ExternalRef: externalRef, Note: note}
	}
}

// WithResolutionFence binds a WithResolution verdict to the attempt it is
// about: the operation's fence as the operator read it (Operation.fence).
// The ledger refuses it (RESOLUTION_NOT_APPLICABLE) if the operation has
// moved on to another attempt since, so a verdict on an attempt that is
// over never lands on a later one. Give it after WithResolution.
func WithResolutionFence(fence int64) ReconcileOption {
	return func(r *opledgerv1.ReconcileRequest) {
		if r.Resolution != nil {
			r.Resolution.Fence = fence
		}
	}
}

// Reconcile resolves an OUTCOME_UNKNOWN (or abandoned EXECUTING) operation by
// looking the downstream up, or by an operator's WithResolution.
func (c *Client) Reconcile(ctx context.Context, operationID string, opts ...ReconcileOption) (*opledgerv1.ReconcileResponse, error) {
	req := &opledgerv1.ReconcileRequest{OperationId: operationID}
	for _, o := range opts {
		o(req)
	}
	var resp *opledgerv1.ReconcileResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Reconcile(ctx, req)
		return err
	})
	return resp, err
}

// call attaches the credentials (and the idempotency key, built once so every
// attempt carries the same one) and runs rpc under the retry policy, each
// attempt with the client's deadline, or wait plus waitMargin when the
// server is asked to wait longer.
func (c *Client) call(ctx context.Context, idempotencyKey string, wait time.Duration, rpc func(context.Context) error) error {
	kv := []string{"authorization", "Bearer " + c.apiKey}
	if idempotencyKey != "" {
		kv = append(kv, "idempotency-key", idempotencyKey)
	}
	timeout := c.timeout
	if timeout > 0 && wait > 0 {
		timeout = max(timeout, wait+waitMargin)
	}
	return c.retry.retry(metadata.AppendToOutgoingContext(ctx, kv...), func(ctx context.Context) error {
		if timeout <= 0 {
			return rpc(ctx)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return rpc(ctx)
	})
}

// toStruct accepts the argument shapes Prepare documents.
func toStruct(args any) (*structpb.Struct, error) {
	switch a := args.(type) {
	case nil:
		return &structpb.Struct{}, nil
	case *structpb.Struct:
		if a == nil {
			return &structpb.Struct{}, nil
		}
		return a, nil
	case map[string]any:
		if lit, carried, bad := inexactValue(a); bad {
			return nil, inexactError(lit, carried)
		}
		s, err := structpb.NewStruct(a)
		if err != nil {
			return nil, fmt.Errorf("opledger: args: %w", err)
		}
		return s, nil
	case json.RawMessage:
		s := &structpb.Struct{}
		if err := protojson.Unmarshal(a, s); err != nil {
			return nil, fmt.Errorf("opledger: args must be a JSON object: %w", err)
		}
		if lit, carried, bad := InexactNumber(a); bad {
			return nil, inexactError(lit, carried)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("opledger: args must be map[string]any, *structpb.Struct or json.RawMessage, got %T", args)
	}
}

// Cancel withdraws an operation nobody has executed yet (AWAITING_APPROVAL or
// READY); repeating it returns Replayed. reason is kept in the event log.
func (c *Client) Cancel(ctx context.Context, operationID, reason string) (*opledgerv1.CancelResponse, error) {
	req := &opledgerv1.CancelRequest{OperationId: operationID, Reason: reason}
	var resp *opledgerv1.CancelResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Cancel(ctx, req)
		return err
	})
	return resp, err
}

// ListTools returns the tools the server is configured with (every version;
// Tool.Current marks the one Prepare uses without WithToolVersion), with
// their descriptions, effects, approval policies and argument JSON Schemas.
func (c *Client) ListTools(ctx context.Context) (*opledgerv1.ListToolsResponse, error) {
	var resp *opledgerv1.ListToolsResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListTools(ctx, &opledgerv1.ListToolsRequest{})
		return err
	})
	return resp, err
}

// ListOperationsOption tunes ListOperations.
type ListOperationsOption func(*opledgerv1.ListOperationsRequest)

// WithStates lists only operations in these states.
func WithStates(states ...opledgerv1.State) ListOperationsOption {
	return func(r *opledgerv1.ListOperationsRequest) { r.States = append(r.States, states...) }
}

// WithTool lists only operations of this tool.
func WithTool(tool string) ListOperationsOption {
	return func(r *opledgerv1.ListOperationsRequest) { r.Tool = tool }
}

// WithPageSize asks for at most n operations per page (the server's default
// is 50 and its maximum 200).
func WithPageSize(n int32) ListOperationsOption {
	return func(r *opledgerv1.ListOperationsRequest) { r.PageSize = n }
}

// WithPageToken asks for the page after the one that returned token (its
// NextPageToken); pass the same states and tool as for that page.
func WithPageToken(token string) ListOperationsOption {
	return func(r *opledgerv1.ListOperationsRequest) { r.PageToken = token }
}

// ListOperations returns one page of the tenant's operations, newest first.
// NextPageToken is empty on the last page.
func (c *Client) ListOperations(ctx context.Context, opts ...ListOperationsOption) (*opledgerv1.ListOperationsResponse, error) {
	req := &opledgerv1.ListOperationsRequest{}
	for _, o := range opts {
		o(req)
	}
	var resp *opledgerv1.ListOperationsResponse
	err := c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListOperations(ctx, req)
		return err
	})
	return resp, err
}
