package mcpgateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	client "github.com/opledger/opledger/clients/go"
)

// TLS modes of ConnConfig.TLS.
const (
	// TLSAuto is plaintext for a loopback target (127.0.0.0/8, ::1,
	// localhost), where `opledger serve` and `opledger dev` listen in
	// plaintext by default, and TLS for every other target.
	TLSAuto = "auto"
	// TLSOn always uses TLS.
	TLSOn = "on"
	// TLSOff always uses plaintext: only for a target reached over a trusted
	// network or a TLS-terminating sidecar, because the agent key travels in
	// every call.
	TLSOff = "off"
)

// ConnConfig is how the gateway reaches the ledger's gRPC service.
type ConnConfig struct {
	// Target is the service's address, HOST:PORT or a gRPC target URI.
	Target string
	// APIKey is the agent key sent with every call.
	APIKey string
	// TLS is TLSAuto (""), TLSOn or TLSOff.
	TLS string
	// CAFile, when set, is a PEM bundle of the roots that sign the server's
	// certificate (the default: the system roots).
	CAFile string
	// CertFile and KeyFile, when set, are the client certificate and key the
	// gateway presents to a server that requires mTLS.
	CertFile, KeyFile string
}

// Plaintext reports whether cfg connects without TLS, and refuses a
// combination that cannot be what the user meant.
func (cfg ConnConfig) Plaintext() (bool, error) {
	switch cfg.TLS {
	case "", TLSAuto:
		return isLoopback(cfg.Target) && cfg.CAFile == "" && cfg.CertFile == "", nil
	case TLSOn:
		return false, nil
	case TLSOff:
		if cfg.CAFile != "" || cfg.CertFile != "" {
			return false, errors.New("--tls off contradicts a TLS CA or client certificate")
		}
		return true, nil
	}
	return false, fmt.Errorf("TLS mode %q is not auto, on or off", cfg.TLS)
}

// Dial returns a client of the ledger authenticated with cfg.APIKey. The
// connection is lazy: nothing is sent until the first call.
func Dial(cfg ConnConfig) (*client.Client, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("OPLEDGER_API_KEY is not set: the gateway needs an agent key")
	}
	if cfg.Target == "" {
		return nil, errors.New("no target: set --target or OPLEDGER_TARGET")
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("a client certificate and its key go together")
	}
	plain, err := cfg.Plaintext()
	if err != nil {
		return nil, err
	}
	if plain {
		return client.New(cfg.Target, cfg.APIKey, client.WithPlaintext())
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("tls ca: no certificate found in " + cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return client.New(cfg.Target, cfg.APIKey, client.WithTLSConfig(tc))
}

// isLoopback reports whether a gRPC target names this machine by a
// loopback address or "localhost".
func isLoopback(target string) bool {
	t := target
	for _, scheme := range []string{"dns:///", "passthrough:///", "dns:"} {
		t = strings.TrimPrefix(t, scheme)
	}
	host := t
	if h, _, err := net.SplitHostPort(t); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
