package tool

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/opledger/opledger/executor"
)

const (
	// maxAttemptsLimit keeps a misconfigured retry count from hammering a
	// downstream that is already failing.
	maxAttemptsLimit = 10
)

var (
	versionRE    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// reservedHeaders are set by the HTTP executor itself; a static value would
// break the idempotency contract or the request framing.
var reservedHeaders = map[string]bool{
	"idempotency-key":   true,
	"content-type":      true,
	"content-length":    true,
	"host":              true,
	"transfer-encoding": true,
	"connection":        true,
}

type fileDoc struct {
	Tools  []toolDoc  `yaml:"tools"`
	Limits []limitDoc `yaml:"limits"`
}

type toolDoc struct {
	Name        string       `yaml:"name"`
	Version     string       `yaml:"version"`
	Description string       `yaml:"description"`
	Effect      string       `yaml:"effect"`
	Approval    *approvalDoc `yaml:"approval"`
	Deny        []denyDoc    `yaml:"deny"`
	Identity    *identityDoc `yaml:"identity"`
	ArgsSchema  yaml.Node    `yaml:"args_schema"`
	Executor    *executorDoc `yaml:"executor"`
}

type approvalDoc struct {
	Required  bool      `yaml:"required"`
	When      string    `yaml:"when"`
	Approvers yaml.Node `yaml:"approvers"`
	TTL       string    `yaml:"ttl"`
	Editable  []string  `yaml:"editable"`
}

type executorDoc struct {
	Type             string            `yaml:"type"`
	URL              string            `yaml:"url"`
	Timeout          string            `yaml:"timeout"`
	DedupesKeys      bool              `yaml:"dedupes_keys"`
	LookupURL        string            `yaml:"lookup_url"`
	LookupConsistent bool              `yaml:"lookup_consistent"`
	ExternalRefField string            `yaml:"external_ref_field"`
	MaxAttempts      *int              `yaml:"max_attempts"`
	KeyRetention     string            `yaml:"key_retention"`
	WebhookSecret    string            `yaml:"webhook_secret"`
	Headers          map[string]string `yaml:"headers"`
	// Classification (see executor.Classification).
	DefinitiveStatuses []int    `yaml:"definitive_statuses"`
	LookupStatusField  string   `yaml:"lookup_status_field"`
	LookupSucceeded    []string `yaml:"lookup_succeeded"`
	LookupFailed       []string `yaml:"lookup_failed"`
	LookupPending      []string `yaml:"lookup_pending"`
}

// yamlTypeNames makes yaml.v3's "field x not found in type tool.executorDoc"
// speak the file's language.
var yamlTypeNames = strings.NewReplacer(
	"type tool.fileDoc", "the top level",
	"type tool.toolDoc", "tool",
	"type tool.approvalDoc", "approval",
	"type tool.denyDoc", "deny rule",
	"type tool.limitDoc", "limit",
	"type tool.identityDoc", "identity",
	"type tool.executorDoc", "executor",
)

// Load reads and parses the tools file at path; see Parse.
func Load(path string, getenv func(string) string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	r, err := Parse(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("tools file %s: %w", path, err)
	}
	return r, nil
}

// Parse builds a registry from the YAML text of a tools file. ${VAR} and
// ${VAR:-default} are expanded with getenv (os.Getenv when nil) before the
// YAML is parsed, and $$ stands for a literal $. Errors name the tool and
// the field that is wrong.
func Parse(data []byte, getenv func(string) string) (*Registry, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	expanded, err := expandEnv(data, getenv)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no tools declared")
		}
		return nil, errors.New(yamlTypeNames.Replace(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document; want exactly one")
	}
	if len(doc.Tools) == 0 {
		return nil, errors.New("no tools declared")
	}
	r := &Registry{byName: map[string][]*Tool{}}
	for i := range doc.Tools {
		td := &doc.Tools[i]
		t, err := buildTool(td)
		if err != nil {
			return nil, fmt.Errorf("tools[%d] %s: %w", i, describe(td), err)
		}
		for _, prev := range r.byName[t.Name] {
			if prev.Version == t.Version {
				return nil, fmt.Errorf("tools[%d] %s: duplicate name and version", i, describe(td))
			}
		}
		r.byName[t.Name] = append(r.byName[t.Name], t)
		r.list = append(r.list, t)
	}
	if err := buildLimits(r, doc.Limits); err != nil {
		return nil, err
	}
	for i := range doc.Tools {
		td := &doc.Tools[i]
		t, _ := r.Lookup(td.Name, td.Version)
		if t.Approval.TTL != 0 && !t.Approval.MayRequire() && !slices.ContainsFunc(t.Limits, func(l *Limit) bool { return l.Over == OverApprove }) {
			return nil, fmt.Errorf("tools[%d] %s: approval.ttl: set but approval.required is false, approval.when is not set, "+
				"and no limit with over: approve counts this tool", i, describe(td))
		}
	}
	slices.SortFunc(r.list, func(a, b *Tool) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
	})
	return r, nil
}

func describe(td *toolDoc) string {
	if td.Name == "" {
		return "(unnamed)"
	}
	if td.Version == "" {
		return fmt.Sprintf("%q", td.Name)
	}
	return fmt.Sprintf("%q version %q", td.Name, td.Version)
}

func buildTool(td *toolDoc) (*Tool, error) {
	if !ValidName(td.Name) {
		return nil, fmt.Errorf("name: %q does not match %s", td.Name, NamePattern)
	}
	if !versionRE.MatchString(td.Version) {
		return nil, fmt.Errorf("version: %q does not match %s", td.Version, versionRE)
	}
	t := &Tool{Name: td.Name, Version: td.Version, Description: td.Description, Effect: Effect(td.Effect)}
	if td.Effect == "" {
		return nil, errors.New("effect: missing (read_only, idempotent or side_effect)")
	}
	if !t.Effect.Valid() {
		return nil, fmt.Errorf("effect: %q is not read_only, idempotent or side_effect", td.Effect)
	}
	var err error
	if t.Approval, err = buildApproval(td.Approval); err != nil {
		return nil, err
	}
	if t.ArgsSchema, t.schema, err = compileSchema(&td.ArgsSchema, td.Name, td.Version); err != nil {
		return nil, err
	}
	t.quick = compileQuick(t.schema)
	if err := buildPolicy(t, td.Deny, td.Approval); err != nil {
		return nil, err
	}
	if err := buildIdentity(t, td.Identity); err != nil {
		return nil, err
	}
	if td.Executor == nil {
		return nil, errors.New("executor: missing")
	}
	if t.Executor, err = buildExecutor(td.Executor); err != nil {
		return nil, err
	}
	t.Executor.Tool = t.Name
	return t, nil
}

func buildApproval(ad *approvalDoc) (Approval, error) {
	if ad == nil {
		return Approval{}, nil
	}
	a := Approval{Required: ad.Required, When: strings.TrimSpace(ad.When), Approvers: 1, Editable: ad.Editable}
	if a.Required && a.When != "" {
		return Approval{}, errors.New("approval: required and when are exclusive (required: true needs approval for every call; when: for the calls it holds for)")
	}
	needs := a.Required || a.When != ""
	if ad.Approvers.Kind != 0 {
		if !needs {
			return Approval{}, fmt.Errorf("approval.approvers: %w", errNoApproval)
		}
		var n int
		switch {
		case ad.Approvers.Kind == yaml.ScalarNode && ad.Approvers.Tag == "!!int":
			if err := ad.Approvers.Decode(&n); err != nil {
				return Approval{}, fmt.Errorf("approval.approvers: %w", err)
			}
			if n < 1 || n > MaxApprovers {
				return Approval{}, fmt.Errorf("approval.approvers: %d is not between 1 and %d", n, MaxApprovers)
			}
			a.Approvers = n
		case ad.Approvers.Kind == yaml.ScalarNode && ad.Approvers.Tag == "!!str":
			// A CEL expression yielding the number (compiled in buildPolicy).
			a.ApproversExpr = strings.TrimSpace(ad.Approvers.Value)
			a.Approvers = MaxApprovers
		default:
			return Approval{}, fmt.Errorf("approval.approvers (line %d): a number from 1 to %d, or a CEL expression yielding one", ad.Approvers.Line, MaxApprovers)
		}
	}
	if len(a.Editable) > 0 && !needs {
		return Approval{}, fmt.Errorf("approval.editable: %w", errNoApproval)
	}
	for i, f := range a.Editable {
		if f == "" || slices.Contains(a.Editable[:i], f) {
			return Approval{}, fmt.Errorf("approval.editable: %q is empty or listed twice", f)
		}
	}
	if ad.TTL != "" {
		ttl, err := time.ParseDuration(ad.TTL)
		if err != nil {
			return Approval{}, fmt.Errorf("approval.ttl: %w", err)
		}
		if ttl <= 0 {
			return Approval{}, fmt.Errorf("approval.ttl: %s is not positive", ad.TTL)
		}
		a.TTL = ttl
	}
	if needs && a.TTL == 0 {
		return Approval{}, errors.New("approval.ttl: required when approval.required is true or approval.when is set")
	}
	// A ttl alone is how long an approval that a limit with `over: approve`
	// demands lasts.
	if !needs {
		a.Approvers = 0
	}
	return a, nil
}

func buildExecutor(ed *executorDoc) (ExecutorConfig, error) {
	e := ExecutorConfig{
		Type:             strings.TrimSpace(ed.Type),
		URL:              ed.URL,
		LookupURL:        ed.LookupURL,
		DedupesKeys:      ed.DedupesKeys,
		LookupConsistent: ed.LookupConsistent,
		ExternalRefField: ed.ExternalRefField,
		Headers:          map[string]string{},
		Classification: executor.Classification{DefinitiveStatuses: ed.DefinitiveStatuses, LookupStatusField: ed.LookupStatusField,
			LookupSucceeded: ed.LookupSucceeded, LookupFailed: ed.LookupFailed, LookupPending: ed.LookupPending},
	}
	if e.Type == "" {
		return e, errors.New("executor.type: missing")
	}
	if ed.Timeout != "" {
		d, err := time.ParseDuration(ed.Timeout)
		if err != nil {
			return e, fmt.Errorf("executor.timeout: %w", err)
		}
		if d <= 0 {
			return e, fmt.Errorf("executor.timeout: %s is not positive", ed.Timeout)
		}
		e.Timeout = d
	}
	if ed.MaxAttempts != nil {
		n := *ed.MaxAttempts
		if n < 1 || n > maxAttemptsLimit {
			return e, fmt.Errorf("executor.max_attempts: %d is not between 1 and %d", n, maxAttemptsLimit)
		}
		// Retrying a downstream that does not dedupe keys could perform the
		// side effect twice.
		if n > 1 && !e.DedupesKeys {
			return e, errors.New("executor.max_attempts: more than 1 needs dedupes_keys: true")
		}
		e.MaxAttempts = n
	}
	if ed.KeyRetention != "" {
		d, err := time.ParseDuration(ed.KeyRetention)
		if err != nil || d <= 0 {
			return e, fmt.Errorf("executor.key_retention: %q is not a positive duration", ed.KeyRetention)
		}
		if !e.DedupesKeys {
			return e, errors.New("executor.key_retention: set without dedupes_keys")
		}
		e.KeyRetention = d
	}
	if ed.WebhookSecret != "" {
		if len(ed.WebhookSecret) < 16 {
			return e, errors.New("executor.webhook_secret: at least 16 characters")
		}
		e.WebhookSecret = ed.WebhookSecret
	}
	if err := e.Classification.Validate(); err != nil {
		return e, fmt.Errorf("executor.%w", err)
	}
	if e.LookupURL == "" && (e.LookupStatusField != "" || len(e.LookupSucceeded)+len(e.LookupFailed)+len(e.LookupPending) > 0) {
		return e, errors.New("executor.lookup_status_field, lookup_succeeded, lookup_failed, lookup_pending: set without lookup_url")
	}
	if (ed.LookupSucceeded != nil || ed.LookupFailed != nil || ed.LookupPending != nil) &&
		len(ed.LookupSucceeded)+len(ed.LookupFailed)+len(ed.LookupPending) == 0 {
		// All three empty would read as "the defaults" further on.
		return e, errors.New("executor.lookup_succeeded, lookup_failed, lookup_pending: declared, and empty: no lookup could settle anything; omit them for the defaults, or list the values")
	}
	if e.LookupConsistent && e.LookupURL == "" {
		return e, errors.New("executor.lookup_consistent: set without lookup_url")
	}
	if e.ExternalRefField != "" {
		for _, seg := range strings.Split(e.ExternalRefField, ".") {
			if seg == "" {
				return e, fmt.Errorf("executor.external_ref_field: %q has an empty path segment", e.ExternalRefField)
			}
		}
	}
	for k, v := range ed.Headers {
		if !headerNameRE.MatchString(k) {
			return e, fmt.Errorf("executor.headers: %q is not a valid header name", k)
		}
		if reservedHeaders[strings.ToLower(k)] {
			return e, fmt.Errorf("executor.headers: %q is set by the executor", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return e, fmt.Errorf("executor.headers: value of %q contains a line break or NUL", k)
		}
		e.Headers[k] = v
	}
	if e.Type == "http" {
		if err := checkHTTPURL(e.URL); err != nil {
			return e, fmt.Errorf("executor.url: %w", err)
		}
		if e.LookupURL != "" {
			if !strings.Contains(e.LookupURL, "{key}") {
				return e, errors.New("executor.lookup_url: has no {key} placeholder")
			}
			if err := checkHTTPURL(strings.ReplaceAll(e.LookupURL, "{key}", "k")); err != nil {
				return e, fmt.Errorf("executor.lookup_url: %w", err)
			}
		}
	}
	return e, nil
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q is not an http or https URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	return nil
}

// compileSchema converts the YAML schema to JSON and compiles it with its
// own compiler (so $id values of different tools cannot clash) that loads
// nothing from outside: a tools file must be self-contained.
func compileSchema(n *yaml.Node, name, version string) (json.RawMessage, *jsonschema.Schema, error) {
	if n.Kind == 0 {
		return nil, nil, errors.New("args_schema: missing")
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("args_schema: %w", err)
	}
	v, err := jsonCompatible(v, "")
	if err != nil {
		return nil, nil, fmt.Errorf("args_schema (line %d): %w", n.Line, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("args_schema (line %d): not a mapping", n.Line)
	}
	if obj["type"] != "object" {
		return nil, nil, fmt.Errorf("args_schema (line %d): type must be object", n.Line)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("args_schema: %w", err)
	}
	// Re-read through the library so numbers become json.Number, as it
	// expects.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("args_schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	loc := "urn:opledger:tool:" + url.PathEscape(name) + ":" + url.PathEscape(version)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, nil, fmt.Errorf("args_schema: %w", err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, nil, fmt.Errorf("args_schema (line %d): %w", n.Line, err)
	}
	return raw, sch, nil
}

type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("refusing to load %q: args_schema must be self-contained", u)
}

// jsonCompatible checks that a YAML-decoded value is plain JSON, turning the
// things YAML has and JSON lacks into errors that say where they are.
func jsonCompatible(v any, path string) (any, error) {
	switch v := v.(type) {
	case nil, bool, string, int, int64, uint64:
		return v, nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s: %v is not a JSON number", where(path), v)
		}
		return v, nil
	case map[string]any:
		for k, e := range v {
			c, err := jsonCompatible(e, path+"/"+k)
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	case []any:
		for i, e := range v {
			c, err := jsonCompatible(e, fmt.Sprintf("%s/%d", path, i))
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	case map[any]any:
		return nil, fmt.Errorf("%s: mapping has a key that is not a string", where(path))
	case time.Time:
		return nil, fmt.Errorf("%s: YAML read a timestamp; quote it to make it a string", where(path))
	default:
		return nil, fmt.Errorf("%s: %T is not a JSON value (quote it to make it a string)", where(path), v)
	}
}

func where(path string) string {
	if path == "" {
		return "at the top"
	}
	return "at " + path
}
