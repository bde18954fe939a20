package eventstoretest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target. Cut drops them, as a network
// failure would; Freeze holds every byte from then on, as a hung peer does
// (a stopped process, a partition): the connections stay open and nothing
// answers.
type Proxy struct {
	// Addr is where clients connect, host:port.
	Addr   string
	ln     net.Listener
	target string
	thaw   chan struct{} // closed at cleanup: frozen pipes give up

	mu     sync.Mutex
	conns  []net.Conn
	frozen bool
}

// StartProxy forwards connections on a fresh local port to target until
// the test ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, thaw: make(chan struct{})}
	go p.accept()
	tb.Cleanup(func() {
		ln.Close()
		close(p.thaw)
		p.Cut()
	})
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		frozen := p.frozen
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if frozen {
			continue // accepted, never answered
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until either fails, or until the proxy freezes:
// then what it read is held, never written.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen := p.frozen
			p.mu.Unlock()
			if frozen {
				<-p.thaw
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every connection through the proxy, on both sides, and
// returns how many it closed; new ones are still forwarded.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	return n
}

// Freeze stops forwarding for good, leaving every connection open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}
