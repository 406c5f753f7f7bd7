package chaos

import (
	"errors"
	"net"
	"sync"
	"time"
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
	}
	return "healthy"
}

// Proxy is a TCP proxy between opledger servers and one of their
// dependencies (PostgreSQL or the payment processor). The servers connect
// through it so that the nemesis can slow, cut or reset their traffic
// without touching either end.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	fault   NetFault
	latency time.Duration
	changed chan struct{} // closed and replaced on every change of fault
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
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
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the fault in force; latency matters for NetLatency only.
// NetReset resets the connections open now at once.
func (p *Proxy) Set(f NetFault, latency time.Duration) {
	p.mu.Lock()
	p.fault, p.latency = f, latency
	close(p.changed)
	p.changed = make(chan struct{})
	var victims []*proxyConn
	if f == NetReset {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.close(true)
	}
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
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range all {
		c.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
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
		case closed || f == NetReset:
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
