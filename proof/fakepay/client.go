package fakepay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client drives a fakepay server in another process: tests and the chaos checker use it to
// inject faults and to count effects.
type Client struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:7070".
	BaseURL string
	// HTTP is the client to use; http.DefaultClient when nil.
	HTTP *http.Client
}

// APIError is an error answer from the server.
type APIError struct {
	Status int
	APIErrorDetail
}

// Error describes the answer.
func (e *APIError) Error() string {
	return fmt.Sprintf("fakepay: %d %s: %s", e.Status, e.Type, e.Message)
}

// Faults returns the faults in force.
func (c *Client) Faults(ctx context.Context) (Faults, error) {
	var f Faults
	err := c.do(ctx, http.MethodGet, "/admin/faults", nil, &f)
	return f, err
}

// SetFaults replaces every fault in force with f.
func (c *Client) SetFaults(ctx context.Context, f Faults) error {
	return c.do(ctx, http.MethodPut, "/admin/faults", f, nil)
}

// ClearFaults removes every fault.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/admin/faults", nil, nil)
}

// Reset forgets every charge, e-mail, key and fault.
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/admin/reset", nil, nil)
}

// Charges returns every charge ever made, in creation order.
func (c *Client) Charges(ctx context.Context) ([]Charge, error) {
	var out struct {
		Data []Charge `json:"data"`
	}
	err := c.do(ctx, http.MethodGet, "/charges", nil, &out)
	return out.Data, err
}

// Emails returns every e-mail ever sent, in creation order.
func (c *Client) Emails(ctx context.Context) ([]Email, error) {
	var out struct {
		Data []Email `json:"data"`
	}
	err := c.do(ctx, http.MethodGet, "/emails", nil, &out)
	return out.Data, err
}

// ChargeByKey looks a charge up by idempotency key, as the processor's lookup endpoint sees it
// (so subject to the no_key_support, key_retention and lookup_lag faults). found is false on 404.
func (c *Client) ChargeByKey(ctx context.Context, key string) (ch Charge, found bool, err error) {
	err = c.do(ctx, http.MethodGet, "/charges?idempotency_key="+url.QueryEscape(key), nil, &ch)
	if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusNotFound {
		return Charge{}, false, nil
	}
	return ch, err == nil, err
}

// Charge returns one charge by id; found is false on 404.
func (c *Client) Charge(ctx context.Context, id string) (ch Charge, found bool, err error) {
	err = c.do(ctx, http.MethodGet, "/charges/"+url.PathEscape(id), nil, &ch)
	if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusNotFound {
		return Charge{}, false, nil
	}
	return ch, err == nil, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		var eb errorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error.Type != "" {
			e.APIErrorDetail = eb.Error
		} else {
			e.Type, e.Message = "http_error", strings.TrimSpace(string(b))
		}
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
