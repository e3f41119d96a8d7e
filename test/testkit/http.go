package testkit

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// Send sends a request with c and reads the answer in full. contentType is
// set when not empty; hdr holds header name, value pairs, a "Host" pair
// setting the request's host. The status is 0 when no answer came; a body
// cut short comes with the status and the error.
func Send(c *http.Client, method, url, contentType string, body []byte, hdr ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, err
}
