package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// devLockFile is the lock of a dev directory. Without it a second `opledger
// dev` in the same directory would stop the first one's PostgreSQL
// (pgcluster stops a postmaster it finds running on its data directory)
// and leave the first service answering UNAVAILABLE.
const devLockFile = "dev.lock"

// devLock is an exclusive flock(2) on DIR/dev.lock, held for the life of
// `opledger dev`. The kernel releases it when the process ends, however it
// ends (SIGKILL included), so a crashed instance never blocks the next
// one; the file itself stays and only says who held it last.
type devLock struct {
	f *os.File
}

// devLockInfo is what the lock file says about its holder, for the
// message a second instance prints.
type devLockInfo struct {
	PID      int
	GRPC     string
	Fakepay  string
	Database string
	Started  string
}

// lockDevDir takes dir's lock, or explains who holds it.
func lockDevDir(dir string) (*devLock, error) {
	path := filepath.Join(dir, devLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dev: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("dev: lock %s: %w", path, err)
		}
		b, _ := io.ReadAll(f)
		return nil, errDevRunning(dir, parseDevLockInfo(b))
	}
	return &devLock{f: f}, nil
}

// errDevRunning is the refusal of a second `opledger dev` in dir.
func errDevRunning(dir string, info devLockInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "another opledger dev is running in %s", relOrAbs(dir))
	var parts []string
	if info.PID > 0 {
		parts = append(parts, "pid "+strconv.Itoa(info.PID))
	}
	if info.GRPC != "" {
		parts = append(parts, "gRPC "+info.GRPC)
	}
	if info.Fakepay != "" {
		parts = append(parts, "fake processor "+info.Fakepay)
	}
	if info.Started != "" {
		parts = append(parts, "since "+info.Started)
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	b.WriteString(";\n  use it ('. " + relOrAbs(filepath.Join(dir, "env")) + "' in this shell), stop it first (Ctrl-C in its terminal")
	if info.PID > 0 {
		fmt.Fprintf(&b, ", or kill -INT %d", info.PID)
	}
	b.WriteString("),\n  or run a second one elsewhere: --dir OTHER --listen 127.0.0.1:PORT --fakepay-listen 127.0.0.1:PORT")
	return errors.New(b.String())
}

// update rewrites the lock file's description of its holder. The lock is
// the flock, not the content: a reader racing this write at worst prints
// less detail.
func (l *devLock) update(info devLockInfo) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "pid=%d\ngrpc=%s\nfakepay=%s\ndatabase=%s\nstarted=%s\n", info.PID, info.GRPC, info.Fakepay, info.Database, info.Started)
	if err := l.f.Truncate(0); err != nil {
		return
	}
	_, _ = l.f.WriteAt(b.Bytes(), 0)
}

// Close releases the lock.
func (l *devLock) Close() error { return l.f.Close() }

func parseDevLockInfo(b []byte) devLockInfo {
	var info devLockInfo
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "pid":
			info.PID, _ = strconv.Atoi(v)
		case "grpc":
			info.GRPC = v
		case "fakepay":
			info.Fakepay = v
		case "database":
			info.Database = v
		case "started":
			info.Started = v
		}
	}
	return info
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so that a reader sees the old content or the new, never half.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a leftover keeps its mode under WriteFile
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
