package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger/executor"
)

// checkDedupe: the same key twice makes one effect with one reference; twins with one key
// started together make one effect (the others may answer in flight); the same key with
// another body is reported.
func (r *run) checkDedupe(ctx context.Context, k1, ref string) error {
	if !r.cfg.DedupesKeys {
		for _, c := range []string{"same key twice", "concurrent twins", "same key, another body"} {
			r.add(Check{Declaration: "dedupes_keys", Declared: "false", Case: c, Verdict: NotDeclared,
				Detail: "the ledger never sends a key twice to this downstream, so the probe does not either"})
		}
		return nil
	}
	if err := r.checkRepeat(ctx, k1, ref); err != nil {
		return err
	}
	if err := r.checkTwins(ctx); err != nil {
		return err
	}
	return r.checkOtherBody(ctx, k1, ref)
}

func (r *run) checkRepeat(ctx context.Context, k1, ref string) error {
	x, res, err := r.send(ctx, k1, r.opts.Args)
	if err != nil {
		return err
	}
	r.refused(x, res)
	c := Check{Declaration: "dedupes_keys", Declared: "true", Case: "same key twice", Evidence: []Exchange{x}}
	switch {
	case res.Outcome != executor.OutcomeSucceeded:
		c.Verdict = NotVerifiable
		c.Detail = fmt.Sprintf("the repeat of %s (effect %s) was not answered with the first answer: %s (%s)", k1, orNone(ref), x, res.Detail)
		if res.Outcome == executor.OutcomeFailed {
			c.Detail += "; see definitive_statuses"
		}
	case ref == "" && res.ExternalRef == "":
		c.Verdict = NotVerifiable
		c.Detail = fmt.Sprintf("%s; without a reference (external_ref_field) one effect cannot be told from two", x)
	case res.ExternalRef != ref:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("two effects under one key: %s had made %s, and the repeat %s made another", k1, ref, x)
	default:
		c.Verdict, c.Detail = OK, fmt.Sprintf("the repeat %s names the first effect again", x)
	}
	r.add(c)
	return nil
}

// checkTwins starts Twins requests with one fresh key together, then sends it once more and
// looks it up, and counts the references seen under it.
func (r *run) checkTwins(ctx context.Context) error {
	k2 := r.key()
	n := r.opts.Twins
	xs := make([]Exchange, n)
	results := make([]executor.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			xs[i], results[i], errs[i] = r.send(ctx, k2, r.opts.Args)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			return errs[i]
		}
		r.refused(xs[i], results[i])
	}
	// After the race: what the downstream keeps under the key.
	after, res, err := r.send(ctx, k2, r.opts.Args)
	if err != nil {
		return err
	}
	r.refused(after, res)
	evidence := append(slices.Clone(xs), after)
	if r.hasLookup() {
		lx, _, err := r.lookup(ctx, k2)
		if err != nil {
			return err
		}
		evidence = append(evidence, lx)
	}
	refs := map[string]bool{}
	succeeded := 0
	for _, x := range evidence {
		if x.Ref != "" {
			refs[x.Ref] = true
		}
		if x.Method == http.MethodPost && x.Outcome == executor.OutcomeSucceeded.String() {
			succeeded++
		}
	}
	c := Check{Declaration: "dedupes_keys", Declared: "true", Case: "concurrent twins", Evidence: evidence}
	twins := fmt.Sprintf("%d twins under %s answered %s; then %s", n, k2, summarizeExchanges(xs), after)
	if len(evidence) > n+1 {
		twins += "; lookup " + evidence[n+1].String()
	}
	switch {
	case len(refs) > 1:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("%d effects under one key: %s", len(refs), twins)
	case succeeded == 0:
		c.Verdict, c.Detail = NotVerifiable, "no twin got a 2xx: "+twins
	case len(refs) == 0:
		c.Verdict, c.Detail = NotVerifiable, "without a reference (external_ref_field) one effect cannot be told from several: "+twins
	default:
		c.Verdict, c.Detail = OK, "one effect: "+twins
	}
	r.add(c)
	return nil
}

// checkOtherBody sends k1 again with other args the schema accepts, and reports what the
// downstream does: in service a key never comes with another body, since the ledger derives
// it from the args' fingerprint.
func (r *run) checkOtherBody(ctx context.Context, k1, ref string) error {
	c := Check{Declaration: "dedupes_keys", Declared: "true", Case: "same key, another body", Verdict: OK}
	other, changed := r.otherArgs()
	if other == nil {
		c.Verdict, c.Detail = NotVerifiable, "no change of one member of --args that the args_schema accepts was found"
		r.add(c)
		return nil
	}
	x, res, err := r.send(ctx, k1, other)
	if err != nil {
		return err
	}
	c.Evidence = []Exchange{x}
	const why = " (reported: the ledger derives a key from the args' fingerprint, so it never sends one with another body)"
	switch {
	case res.Outcome == executor.OutcomeSucceeded && ref != "" && res.ExternalRef == ref:
		c.Detail = fmt.Sprintf("with %s changed, %s: the first answer replayed, the body ignored", changed, x)
	case res.Outcome == executor.OutcomeSucceeded:
		c.Detail = fmt.Sprintf("with %s changed, %s: another effect under the key (keys are not bound to bodies)", changed, x)
	default:
		c.Detail = fmt.Sprintf("with %s changed, refused: %s (%s)", changed, x, res.Detail)
	}
	c.Detail += why
	r.add(c)
	return nil
}

// otherArgs returns --args with one member changed (a number plus one, else a string with a
// character added) such that the tool's schema still accepts it, and the member's name.
func (r *run) otherArgs() (json.RawMessage, string) {
	dec := json.NewDecoder(bytes.NewReader(r.opts.Args))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return nil, ""
	}
	names := slices.Sorted(maps.Keys(m))
	var candidates []func() (string, any)
	for _, name := range names {
		if n, ok := m[name].(json.Number); ok {
			candidates = append(candidates, func() (string, any) {
				v, ok := new(big.Rat).SetString(n.String())
				if !ok {
					return name, nil
				}
				return name, json.Number(v.Add(v, big.NewRat(1, 1)).RatString())
			})
		}
	}
	for _, name := range names {
		if s, ok := m[name].(string); ok {
			candidates = append(candidates, func() (string, any) { return name, s + "2" })
		}
	}
	for _, cand := range candidates {
		name, v := cand()
		if v == nil {
			continue
		}
		changed := maps.Clone(m)
		changed[name] = v
		b, err := json.Marshal(changed)
		if err != nil || r.t.ValidateArgs(json.RawMessage(b)) != nil {
			continue
		}
		return b, strconv.Quote(name)
	}
	return nil, ""
}

// checkNeverUsed looks up a key never sent: it must answer the declared not-found, a 404.
func (r *run) checkNeverUsed(ctx context.Context) error {
	if !r.hasLookup() {
		r.add(Check{Declaration: "lookup_url", Declared: "(none)", Case: "a key never used", Verdict: NotDeclared, Detail: "no lookup_url"})
		return nil
	}
	k := r.key()
	x, lr, err := r.lookup(ctx, k)
	if err != nil {
		return err
	}
	c := Check{Declaration: "lookup_url", Declared: ShownURL(r.cfg.LookupURL), Case: "a key never used answers 404 (not found)", Evidence: []Exchange{x}}
	switch {
	case x.Status == http.StatusNotFound:
		c.Verdict, c.Detail = OK, x.String()
	case lr.Status == executor.LookupFound:
		// The lookup finds something for a key nobody sent: it would settle operations by an
		// effect that is not theirs.
		c.Verdict, c.Detail = Contradicted, fmt.Sprintf("%s: found %s for a key never sent (%s)", x, lr.Result.Outcome, lr.Detail)
	case r.cfg.LookupConsistent:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("%s (%s): lookup_consistent: true, yet a key never used is not answered 404, so no lookup ever proves that nothing happened", x, lr.Detail)
	default:
		c.Verdict, c.Detail = NotVerifiable, fmt.Sprintf("%s (%s): not a 404, which the ledger does not trust anyway (lookup_consistent: false)", x, lr.Detail)
	}
	r.add(c)
	return nil
}

// checkInvalid sends --invalid-args under a fresh key: a declared definitive status must come
// back, and the lookup must find nothing under the key, however often it is asked.
func (r *run) checkInvalid(ctx context.Context) error {
	c := Check{Declaration: "definitive_statuses", Declared: r.definitive(), Case: "a request the downstream must refuse (--invalid-args)"}
	if r.opts.InvalidArgs == nil {
		c.Verdict, c.Detail = NotVerifiable, "no --invalid-args FILE given: a JSON object the downstream refuses"
		r.add(c)
		return nil
	}
	k := r.key()
	x, res, err := r.send(ctx, k, r.opts.InvalidArgs)
	if err != nil {
		return err
	}
	// Not r.refused: this check reports its own refusal.
	c.Evidence = []Exchange{x}
	var found []Exchange
	looked := 0
	if r.hasLookup() {
		for range r.opts.Lookups {
			lx, lr, err := r.lookup(ctx, k)
			if err != nil {
				return err
			}
			looked++
			if foundSucceeded(lr) {
				found = append(found, lx)
			}
		}
	}
	switch {
	case res.Outcome == executor.OutcomeSucceeded:
		c.Verdict, c.Detail = NotVerifiable, fmt.Sprintf("the downstream took --invalid-args: %s; give a request it refuses", x)
	case res.HTTPStatus == 0:
		c.Verdict, c.Detail = NotVerifiable, fmt.Sprintf("no answer: %s (%s)", x, res.Detail)
	case res.Outcome != executor.OutcomeFailed:
		c.Verdict = NotVerifiable
		c.Detail = fmt.Sprintf("%s, which the tool does not declare definitive: the ledger leaves such an operation OUTCOME_UNKNOWN", x)
	case len(found) > 0:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("%s is declared definitive (nothing happened), and the lookup finds something under the key: %s", x, found[0])
		c.Evidence = append(c.Evidence, found...)
	case !r.hasLookup():
		c.Verdict = NotVerifiable
		c.Detail = fmt.Sprintf("%s, declared definitive; without a lookup_url nothing shows whether it had an effect", x)
	default:
		c.Verdict = OK
		c.Detail = fmt.Sprintf("%s, declared definitive; %d lookups found nothing under the key", x, looked)
	}
	r.add(c)
	return nil
}

func (r *run) definitive() string {
	if r.cfg.DefinitiveStatuses == nil {
		return "every 4xx but 408, 409, 425, 429"
	}
	return fmt.Sprint(r.cfg.DefinitiveStatuses)
}

// checkRetention: a key_retention no longer than RetentionWait is checked by sending k1 again
// at 90% of it (as far as the ledger trusts it); a longer one is reported as seen.
func (r *run) checkRetention(ctx context.Context, k1, ref string) error {
	kr := r.cfg.KeyRetention
	c := Check{Declaration: "key_retention", Declared: "forever", Case: "the downstream remembers a key as long as declared"}
	if kr > 0 {
		c.Declared = kr.String()
	}
	if !r.cfg.DedupesKeys {
		c.Declared, c.Verdict, c.Detail = "(none)", NotDeclared, "dedupes_keys: false"
		r.add(c)
		return nil
	}
	r.mu.Lock()
	t0 := r.firstSent[k1]
	r.mu.Unlock()
	if kr <= 0 || r.opts.RetentionWait < 0 || kr > r.opts.RetentionWait {
		c.Verdict = NotVerifiable
		c.Detail = fmt.Sprintf("%s was still remembered %s after it was first sent (the last repeat); the probe waits at most %s",
			k1, time.Since(t0).Round(time.Millisecond), max(r.opts.RetentionWait, 0))
		r.add(c)
		return nil
	}
	at := t0.Add(kr * 9 / 10)
	if !sleep(ctx, time.Until(at)) && ctx.Err() != nil {
		return ctx.Err()
	}
	x, res, err := r.send(ctx, k1, r.opts.Args)
	if err != nil {
		return err
	}
	r.refused(x, res)
	c.Evidence = []Exchange{x}
	after := time.Since(t0).Round(time.Millisecond)
	switch {
	case res.Outcome == executor.OutcomeSucceeded && ref != "" && res.ExternalRef == ref:
		c.Verdict, c.Detail = OK, fmt.Sprintf("%s after %s (90%% of %s) still names %s", x, after, kr, ref)
	case res.Outcome == executor.OutcomeSucceeded && ref != "":
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("%s after %s (90%% of %s) made another effect: the key %s (effect %s) was forgotten early", x, after, kr, k1, ref)
	default:
		c.Verdict, c.Detail = NotVerifiable, fmt.Sprintf("%s after %s (90%% of %s) (%s)", x, after, kr, res.Detail)
	}
	r.add(c)
	return nil
}

// checkRefusalsAfterEffects: no answer the tool declares definitive (nothing happened) may come
// for a key under which an effect exists.
func (r *run) checkRefusalsAfterEffects() {
	c := Check{Declaration: "definitive_statuses", Declared: r.definitive(), Case: "no declared refusal for a key with an effect"}
	var bad []Exchange
	for _, x := range r.refusals {
		if len(r.effects[x.Key]) > 0 {
			bad = append(bad, x)
		}
	}
	switch {
	case len(bad) > 0:
		x := bad[0]
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("%s is declared definitive (nothing happened), but %s has effect %s", x, x.Key, orNone(r.effects[x.Key][0]))
		c.Evidence = bad
	default:
		c.Verdict = OK
		c.Detail = fmt.Sprintf("%d keys with an effect; no answer under them was a declared definitive status", len(r.effects))
	}
	r.add(c)
}

// checkUnverifiable reports the declarations a probe cannot settle, with what it saw.
func (r *run) checkUnverifiable() {
	r.add(Check{Declaration: "timeout", Declared: r.cfg.Timeout.String(), Case: "per attempt", Verdict: NotVerifiable,
		Detail: fmt.Sprintf("the slowest of %d answers took %s; the probe does not provoke a timeout", r.rep.Requests, r.slowest.Round(time.Millisecond))})
	c := Check{Declaration: "rate_limits", Declared: "(not declared in a tools file)", Case: "429 answers", Verdict: NotVerifiable}
	if n := r.statuses[http.StatusTooManyRequests]; n > 0 {
		c.Detail = fmt.Sprintf("%d of %d requests were answered 429 (the ledger reads a 429 as an unknown outcome)", n, r.rep.Requests)
	} else {
		c.Detail = fmt.Sprintf("no 429 in %d requests", r.rep.Requests)
	}
	r.add(c)
}

func orNone(ref string) string {
	if ref == "" {
		return "(no reference)"
	}
	return ref
}
