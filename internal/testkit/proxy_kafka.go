package testkit

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// pipeFrames copies Kafka frames (a 4-byte size, then the message) from src
// to dst, holding each while the proxy says so. Requests are noted by
// correlation ID so that the responses that name brokers can be rewritten to
// point at the proxy.
func (p *Proxy) pipeFrames(pc *proxyConn, src, dst net.Conn, response bool) {
	r := bufio.NewReaderSize(src, 64<<10)
	var size [4]byte
	for {
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, msg); err != nil {
			return
		}
		if response {
			msg = p.rewrite(pc, msg)
		} else if len(msg) >= 8 {
			pc.mu.Lock()
			pc.inflight[int32(binary.BigEndian.Uint32(msg[4:8]))] = kafkaReq{
				key: int16(binary.BigEndian.Uint16(msg[0:2])), version: int16(binary.BigEndian.Uint16(msg[2:4]))}
			pc.mu.Unlock()
		}
		if !p.hold(pc, response) {
			return
		}
		frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(msg)), uint32(len(msg)))
		if _, err := dst.Write(append(frame, msg...)); err != nil {
			return
		}
	}
}

// rewrite returns the response msg with every broker address replaced by
// the proxy's; other responses, and any it cannot decode, pass unchanged.
func (p *Proxy) rewrite(pc *proxyConn, msg []byte) []byte {
	if len(msg) < 4 {
		return msg
	}
	corr := int32(binary.BigEndian.Uint32(msg[:4]))
	pc.mu.Lock()
	req, ok := pc.inflight[corr]
	delete(pc.inflight, corr)
	pc.mu.Unlock()
	switch kmsg.Key(req.key) {
	case kmsg.Metadata, kmsg.FindCoordinator, kmsg.DescribeCluster:
	default:
		return msg
	}
	if !ok {
		return msg
	}
	kreq := kmsg.RequestForKey(req.key)
	kreq.SetVersion(req.version)
	body := msg[4:]
	if kreq.IsFlexible() { // response header v1: tagged fields after the correlation ID
		if len(body) < 1 || body[0] != 0 {
			return msg
		}
		body = body[1:]
	}
	resp := kreq.ResponseKind()
	if err := resp.ReadFrom(body); err != nil {
		return msg
	}
	host, ps, _ := net.SplitHostPort(p.Addr())
	port64, _ := strconv.ParseInt(ps, 10, 32)
	port := int32(port64)
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			r.Brokers[i].Host, r.Brokers[i].Port = host, port
		}
	case *kmsg.FindCoordinatorResponse:
		if r.Host != "" {
			r.Host, r.Port = host, port
		}
		for i := range r.Coordinators {
			if r.Coordinators[i].Host != "" {
				r.Coordinators[i].Host, r.Coordinators[i].Port = host, port
			}
		}
	case *kmsg.DescribeClusterResponse:
		for i := range r.Brokers {
			r.Brokers[i].Host, r.Brokers[i].Port = host, port
		}
	}
	out := append([]byte(nil), msg[:len(msg)-len(body)]...)
	return resp.AppendTo(out)
}
