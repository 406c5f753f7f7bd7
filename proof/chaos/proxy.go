package chaos

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NetFault is what a Proxy does to the traffic it carries.
type NetFault int

// The network faults a Proxy injects.
const (
	// NetHealthy forwards every byte at once.
	NetHealthy NetFault = iota
	// NetLatency holds every chunk, in both directions, for the fault's
	// latency before forwarding it.
	NetLatency
	// NetReset resets every open connection (TCP RST) and every connection
	// accepted while the fault lasts.
	NetReset
	// NetBlackhole forwards nothing, in either direction, and opens no new
	// connection to the target, until the fault ends; then traffic flows
	// again as if a partition healed (TCP would have retransmitted).
	NetBlackhole
	// NetRefuse stops listening: a new connection is refused (the kernel
	// answers its SYN with a RST, so not a byte of a request leaves the
	// client), and every open connection is reset. The port stays reserved
	// (bound, not listening) until the fault ends: see reservePort.
	NetRefuse
)

// String names the fault as the history does.
func (f NetFault) String() string {
	switch f {
	case NetLatency:
		return "latency"
	case NetReset:
		return "reset"
	case NetBlackhole:
		return "blackhole"
	case NetRefuse:
		return "refuse"
	}
	return "healthy"
}

// Proxy is a TCP proxy between opledger servers and one of their
// dependencies (PostgreSQL or the payment processor). The servers connect
// through it so that the nemesis can slow, cut or reset their traffic
// without touching either end.
type Proxy struct {
	addr   string
	target string

	mu      sync.Mutex
	fault   NetFault
	latency time.Duration
	changed chan struct{} // closed and replaced on every change of fault
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
	// ln is the listener; nil while NetRefuse holds the port with
	// reserved, a socket bound to it that does not listen.
	ln       net.Listener
	reserved int
}

type proxyConn struct {
	client net.Conn
	done   chan struct{}

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// setServer attaches the target side; false if the connection was closed
// meanwhile (the caller then closes server itself).
func (c *proxyConn) setServer(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.server = server
	return true
}

// close shuts both sides; reset sends a TCP RST instead of a FIN.
func (c *proxyConn) close(reset bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	c.mu.Unlock()
	for _, nc := range []net.Conn{c.client, server} {
		if nc == nil {
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = nc.Close()
	}
	close(c.done)
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target (HOST:PORT).
func NewProxy(target string) (*Proxy, error) { return NewProxyOn("127.0.0.1:0", target) }

// NewProxyOn is NewProxy listening on listen (HOST:PORT).
func NewProxyOn(listen, target string) (*Proxy, error) {
	ln, err := listenShared(listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, addr: ln.Addr().String(), target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}, reserved: -1}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.addr }

// Set replaces the fault in force; latency matters for NetLatency only.
// NetReset and NetRefuse reset the connections open now at once.
func (p *Proxy) Set(f NetFault, latency time.Duration) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.fault, p.latency = f, latency
	close(p.changed)
	p.changed = make(chan struct{})
	var victims []*proxyConn
	if f == NetReset || f == NetRefuse {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	var err error
	switch {
	case f == NetRefuse && p.ln != nil:
		err = p.unlistenLocked()
	case f != NetRefuse && p.ln == nil:
		err = p.relistenLocked()
	}
	p.mu.Unlock()
	if err != nil {
		// Nothing the run can recover from: the proxy's port is gone.
		panic("chaos: proxy " + p.addr + ": " + err.Error())
	}
	for _, c := range victims {
		c.close(true)
	}
}

// unlistenLocked reserves the listener's port with a socket bound to it
// that does not listen, then stops and closes the listener: a connection
// attempt is refused, and the port is never free meanwhile.
//
// Closing the descriptor alone does not stop a listening socket while a
// child process forked by another goroutine (exec.Cmd.Start) still holds a
// copy of the descriptor table, until that child execs; a connection could
// be accepted into the backlog meanwhile. shutdown acts on the socket
// itself, whoever holds it.
func (p *Proxy) unlistenLocked() error {
	fd, err := reservePort(p.addr)
	if err != nil {
		return err
	}
	if sc, ok := p.ln.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(lfd uintptr) { _ = unix.Shutdown(int(lfd), unix.SHUT_RDWR) })
		}
	}
	_ = p.ln.Close()
	p.ln = nil
	p.reserved = fd
	return nil
}

// relistenLocked listens on the reserved port again, then releases it.
func (p *Proxy) relistenLocked() error {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = listenShared(p.addr); err == nil {
			p.ln = ln
			p.wg.Add(1)
			go p.accept(ln)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil && p.reserved >= 0 {
		_ = syscall.Close(p.reserved)
		p.reserved = -1
	}
	return err
}

// listenShared listens on addr with SO_REUSEPORT, so that reservePort's
// socket can hold the port while the listener still does, and a listener can
// take it back while the reservation still holds it: the port is never free
// for another socket to take (a closed listener's port can become any
// outgoing connection's on the machine, or another listener's).
func listenShared(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

// reservePort binds a TCP socket to addr (127.0.0.1:PORT) without listening.
// It shares the port with the proxy's listeners (SO_REUSEPORT) but not with
// sockets that merely reuse addresses (it has no SO_REUSEADDR): a listener
// that is not the proxy's, which sets SO_REUSEADDR as Go's and PostgreSQL's
// do, cannot bind the port while it is reserved.
func reservePort(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Heal ends any fault.
func (p *Proxy) Heal() { p.Set(NetHealthy, 0) }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	var all []*proxyConn
	for c := range p.conns {
		all = append(all, c)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	if p.ln != nil {
		_ = p.ln.Close()
	}
	if p.reserved >= 0 {
		_ = syscall.Close(p.reserved)
		p.reserved = -1
	}
	p.mu.Unlock()
	for _, c := range all {
		c.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := &proxyConn{client: nc, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close(false)
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// gate blocks while the proxy blackholes traffic. It returns the latency to
// apply, or ok=false when the connection must be reset (NetReset) or was
// closed meanwhile.
func (p *Proxy) gate(c *proxyConn) (latency time.Duration, ok bool) {
	for {
		p.mu.Lock()
		f, lat, ch, closed := p.fault, p.latency, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || f == NetReset || f == NetRefuse:
			return 0, false
		case f == NetBlackhole:
			select {
			case <-ch:
				continue
			case <-c.done:
				return 0, false
			}
		case f == NetLatency:
			return lat, true
		default:
			return 0, true
		}
	}
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if _, ok := p.gate(c); !ok {
		c.close(true)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// The target is down (a crashed PostgreSQL): the client sees its
		// connection reset, as it would see a refused one.
		c.close(true)
		return
	}
	if !c.setServer(server) { // reset while dialling
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, c.client, server) }()
	go func() { defer wg.Done(); p.pipe(c, server, c.client) }()
	wg.Wait()
}

// pipe copies src to dst chunk by chunk, each chunk passing the gate, so a
// fault that starts mid-connection takes effect on the next chunk. One
// goroutine per direction keeps the stream in order under latency.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			lat, ok := p.gate(c)
			if !ok {
				c.close(true)
				return
			}
			if lat > 0 {
				select {
				case <-time.After(lat):
				case <-c.done:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				c.close(true)
				return
			}
		}
		if err != nil {
			// EOF or error on one side: close both, as most proxies do; a
			// half-close would keep a PostgreSQL session alive for nothing.
			// A partition holds the close as it holds data: the other side
			// learns of it when the partition heals.
			if _, ok := p.gate(c); !ok {
				c.close(true)
				return
			}
			c.close(false)
			return
		}
	}
}
