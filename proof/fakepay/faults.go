package fakepay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Faults are the failures the server injects. The zero value injects nothing. Triggers apply to
// POST /charges and POST /emails requests that execute (a replayed or refused request never fires
// one), but for LookupMiss, which applies to lookups by key; the other fields are described one by
// one.
//
// In JSON the durations are Go duration strings ("200ms", "1m"); a plain number is read as
// nanoseconds for convenience.
type Faults struct {
	// Delay holds every executing POST in flight, its idempotency key reserved, for this long
	// before it commits, so that a twin with the same key sees 409 and a client timeout shorter
	// than Delay leaves a committed charge behind an unanswered request.
	Delay time.Duration
	// FailBeforeCommit answers 500 without storing anything, not even the idempotency key, so a
	// retry executes afresh.
	FailBeforeCommit Trigger
	// FailAfterCommit commits the charge and stores the key with its 200 result, then answers 500:
	// a retry with the same key replays the 200.
	FailAfterCommit Trigger
	// DropAfterCommit commits the charge and stores the key, then resets the TCP connection with
	// no response at all (the "result lost on the wire" case).
	DropAfterCommit Trigger
	// NoKeySupport makes the server ignore Idempotency-Key: every POST is a new charge and a
	// lookup by key is always 404. The key is still recorded on the charge for diagnosis.
	NoKeySupport bool
	// KeyRetention, when positive, forgets keys this long after their first request: a retry
	// after that creates a new charge and a lookup by key is 404.
	KeyRetention time.Duration
	// LookupLag makes GET /charges?idempotency_key= blind to charges younger than this, like an
	// eventually consistent read replica.
	LookupLag time.Duration
	// RedirectAfterCommit commits the charge and stores the key, then answers 303 See Other
	// pointing at the charge (a downstream that acts, then redirects to a receipt).
	RedirectAfterCommit Trigger
	// RefuseReplay answers a request whose key already has a committed charge with 400 instead
	// of replaying the stored answer: a refusal that follows an effect, which proves nothing
	// about it.
	RefuseReplay Trigger
	// KeyRace checks keys with a read-then-insert race: a POST /charges whose key is new is
	// reserved only this long after it was looked for, so that twins arriving within it each find
	// the key free and each make a charge (a processor whose "SELECT, then INSERT" has no unique
	// constraint behind it). Requests one after the other still replay. 0 is no race.
	KeyRace time.Duration
	// LookupMiss makes a lookup by key that fires answer 404 for a charge the server holds under
	// that key: with a rate below 1, a lookup served by replicas of which some are behind (an
	// eventually consistent read that a repeated lookup catches); with rate 1, a lookup that does
	// not know what POST /charges knows (a 404 for a known key).
	LookupMiss Trigger
	// RefuseAfterCommit commits the charge (or sends the e-mail) and stores the key with its 200
	// result, then answers 402 (type card_error): a refusal the default classification reads as
	// definitive, following an effect. A retry with the same key replays the 200.
	RefuseAfterCommit Trigger
}

// Trigger decides whether a fault fires: on each of the next Next matching requests, and after
// those with probability Rate (0 never, 1 always).
type Trigger struct {
	Next int     `json:"next"`
	Rate float64 `json:"rate"`
}

// Validate reports a Faults value that cannot be applied, such as a negative duration or a rate
// outside [0, 1].
func (f Faults) Validate() error {
	var errs []error
	durations := []struct {
		name string
		d    time.Duration
	}{{"delay", f.Delay}, {"key_retention", f.KeyRetention}, {"lookup_lag", f.LookupLag}, {"key_race", f.KeyRace}}
	for _, x := range durations {
		if x.d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", x.name))
		}
	}
	triggers := []struct {
		name string
		t    Trigger
	}{{"fail_before_commit", f.FailBeforeCommit}, {"fail_after_commit", f.FailAfterCommit}, {"drop_after_commit", f.DropAfterCommit},
		{"redirect_after_commit", f.RedirectAfterCommit}, {"refuse_replay", f.RefuseReplay},
		{"lookup_miss", f.LookupMiss}, {"refuse_after_commit", f.RefuseAfterCommit}}
	for _, x := range triggers {
		if x.t.Next < 0 {
			errs = append(errs, fmt.Errorf("%s.next must not be negative", x.name))
		}
		if !(x.t.Rate >= 0 && x.t.Rate <= 1) { // also catches NaN
			errs = append(errs, fmt.Errorf("%s.rate must be within [0, 1]", x.name))
		}
	}
	return errors.Join(errs...)
}

// faultsJSON is the wire form of Faults; durations travel as strings so that people can write
// "200ms" in a curl command.
type faultsJSON struct {
	Delay            jsonDuration `json:"delay"`
	FailBeforeCommit Trigger      `json:"fail_before_commit"`
	FailAfterCommit  Trigger      `json:"fail_after_commit"`
	DropAfterCommit  Trigger      `json:"drop_after_commit"`
	NoKeySupport     bool         `json:"no_key_support"`
	KeyRetention     jsonDuration `json:"key_retention"`
	LookupLag        jsonDuration `json:"lookup_lag"`
	RedirectAfter    Trigger      `json:"redirect_after_commit"`
	RefuseReplay     Trigger      `json:"refuse_replay"`
	KeyRace          jsonDuration `json:"key_race"`
	LookupMiss       Trigger      `json:"lookup_miss"`
	RefuseAfter      Trigger      `json:"refuse_after_commit"`
}

// MarshalJSON encodes f with Go duration strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		Delay:            jsonDuration(f.Delay),
		FailBeforeCommit: f.FailBeforeCommit,
		FailAfterCommit:  f.FailAfterCommit,
		DropAfterCommit:  f.DropAfterCommit,
		NoKeySupport:     f.NoKeySupport,
		KeyRetention:     jsonDuration(f.KeyRetention),
		LookupLag:        jsonDuration(f.LookupLag),
		RedirectAfter:    f.RedirectAfterCommit,
		RefuseReplay:     f.RefuseReplay,
		KeyRace:          jsonDuration(f.KeyRace),
		LookupMiss:       f.LookupMiss,
		RefuseAfter:      f.RefuseAfterCommit,
	})
}

// UnmarshalJSON decodes f strictly: an unknown field is an error, because a misspelt fault
// silently injecting nothing would make a chaos run prove nothing.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var w faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*f = Faults{
		Delay:               time.Duration(w.Delay),
		FailBeforeCommit:    w.FailBeforeCommit,
		FailAfterCommit:     w.FailAfterCommit,
		DropAfterCommit:     w.DropAfterCommit,
		NoKeySupport:        w.NoKeySupport,
		KeyRetention:        time.Duration(w.KeyRetention),
		LookupLag:           time.Duration(w.LookupLag),
		RedirectAfterCommit: w.RedirectAfter,
		RefuseReplay:        w.RefuseReplay,
		KeyRace:             time.Duration(w.KeyRace),
		LookupMiss:          w.LookupMiss,
		RefuseAfterCommit:   w.RefuseAfter,
	}
	return nil
}

// jsonDuration is a time.Duration that reads and writes Go duration strings.
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*d = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			*d = 0
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = jsonDuration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration must be a string such as \"200ms\" or integer nanoseconds: %w", err)
	}
	*d = jsonDuration(n)
	return nil
}
