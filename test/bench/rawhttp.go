package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 client on one keep-alive connection, used
// by the open-loop latency stage so the load generator, which shares the
// two cores with agentbus, costs as little as a load generator on another
// machine would let it: requests are written from bytes built once, and the
// answer is read by its status line and Content-Length only. It is not a
// general client: it refuses chunked answers and anything it cannot frame,
// and one rawConn is used by one goroutine at a time.
type rawConn struct {
	addr, head string
	c          net.Conn
	r          *bufio.Reader
	w          *bufio.Writer
	body       []byte // the last answer's body, reused
}

// newRawConn prepares POSTs of JSON bodies to rawURL (http only); the
// connection is dialled on first use and again after an error.
func newRawConn(rawURL string) (*rawConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("raw client: want an http://host:port/path URL, got %q", rawURL)
	}
	path := u.RequestURI()
	return &rawConn{
		addr: u.Host,
		head: "POST " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nContent-Length: ",
	}, nil
}

func (rc *rawConn) dial() error {
	c, err := net.DialTimeout("tcp", rc.addr, 5*time.Second)
	if err != nil {
		return err
	}
	rc.c, rc.r, rc.w = c, bufio.NewReaderSize(c, 4096), bufio.NewWriterSize(c, 4096)
	return nil
}

// post sends body and returns the status and the answer's body (valid until
// the next call). On any error the connection is closed, so the next call
// starts afresh.
func (rc *rawConn) post(body []byte) (int, []byte, error) {
	if rc.c == nil {
		if err := rc.dial(); err != nil {
			return 0, nil, err
		}
	}
	status, b, err := rc.roundTrip(body)
	if err != nil {
		rc.close()
	}
	return status, b, err
}

func (rc *rawConn) roundTrip(body []byte) (int, []byte, error) {
	_ = rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	rc.w.WriteString(rc.head)
	var num [20]byte
	rc.w.Write(strconv.AppendInt(num[:0], int64(len(body)), 10))
	rc.w.WriteString("\r\n\r\n")
	rc.w.Write(body)
	if err := rc.w.Flush(); err != nil {
		return 0, nil, err
	}
	line, err := rc.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, fmt.Errorf("raw client: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("raw client: bad status line %q", line)
	}
	length, closeAfter := -1, false
	for {
		line, err := rc.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("raw client: bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("raw client: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, errors.New("raw client: chunked answers are not supported")
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closeAfter = true
		}
	}
	if length < 0 {
		return 0, nil, errors.New("raw client: answer without Content-Length")
	}
	if cap(rc.body) < length {
		rc.body = make([]byte, length)
	}
	rc.body = rc.body[:length]
	if _, err := io.ReadFull(rc.r, rc.body); err != nil {
		return 0, nil, err
	}
	if closeAfter {
		rc.close()
	}
	return status, rc.body, nil
}

func (rc *rawConn) close() {
	if rc.c != nil {
		rc.c.Close()
		rc.c = nil
	}
}
