package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/mod/sumdb/note"
)

// auditKeyName is the name a checkpoint key signs with (the signed note's
// key name, which a verifier's key must match).
const auditKeyName = "opledger-audit"

func cmdAuditKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit keygen", "--out FILE", `
Makes an Ed25519 key for signing the receipts' checkpoints, in the signed
note format of the Go checksum database (golang.org/x/mod/sumdb/note): the
private key to FILE (mode 0600, never overwritten), the public key to
FILE.pub. Give FILE to serve --audit-signing-key and FILE.pub to whoever
verifies an export.`)
	var out, name string
	fs.StringVar(&out, "out", "", "`FILE` for the private key (the public key goes to FILE.pub)")
	fs.StringVar(&name, "name", auditKeyName, "the key's `name`, which every checkpoint it signs carries")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if out == "" {
		return errors.New("audit keygen: --out FILE is required")
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return fmt.Errorf("audit keygen: %w", err)
	}
	if err := writeNew(out, skey+"\n", 0o600); err != nil {
		return err
	}
	if err := writeNew(out+".pub", vkey+"\n", 0o644); err != nil {
		_ = os.Remove(out)
		return err
	}
	fmt.Fprintf(stdout, "private key written to %s, public key to %s.pub:\n%s\n", out, out, vkey)
	return nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path, content string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("audit keygen: %w", err)
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return fmt.Errorf("audit keygen: %w", err)
	}
	return f.Close()
}
