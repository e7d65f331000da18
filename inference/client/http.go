package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPOptions configure an HTTP client.
type HTTPOptions struct {
	// JSON sends input data and asks for outputs as JSON numbers instead of
	// binary tensor data (much slower; for servers without the extension).
	JSON bool
	// MaxConnsPerHost bounds connections to the server; 0 means 64. Idle ones
	// are kept for reuse.
	MaxConnsPerHost int
	// MaxResponseBytes bounds a response body; 0 means 1 GiB.
	MaxResponseBytes int64
	// ReadPoll, if positive, makes each connection's reads look for the
	// server's next bytes for up to this long before they sleep (package
	// busyread), as GRPCOptions.ReadPoll does.
	ReadPoll time.Duration
	// TLS configures the connections of an https:// base URL (LoadCA makes
	// one that trusts a private CA); nil means the system's roots. It is
	// cloned, not kept.
	TLS *tls.Config
	// Transport, if set, is used instead of one made from the fields above.
	Transport http.RoundTripper
}

// HTTPClient calls a server's HTTP/REST API.
type HTTPClient struct {
	base string
	hc   *http.Client
	opts HTTPOptions
}

// NewHTTP returns a client of the server at baseURL ("http://host:8000").
func NewHTTP(baseURL string, opts HTTPOptions) (*HTTPClient, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	if opts.MaxConnsPerHost <= 0 {
		opts.MaxConnsPerHost = 64
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 1 << 30
	}
	rt := opts.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:                 nil, // a benchmark client never goes through a proxy
			DialContext:           directDialer((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext, opts.ReadPoll),
			MaxIdleConns:          opts.MaxConnsPerHost,
			MaxIdleConnsPerHost:   opts.MaxConnsPerHost,
			MaxConnsPerHost:       opts.MaxConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // inference may queue; the caller's context bounds it
			WriteBufferSize:       256 << 10,
			ReadBufferSize:        256 << 10,
			TLSClientConfig:       opts.TLS.Clone(),
			TLSHandshakeTimeout:   10 * time.Second,
		}
	}
	return &HTTPClient{base: strings.TrimRight(u.String(), "/"), hc: &http.Client{Transport: rt}, opts: opts}, nil
}

// Close releases idle connections.
func (c *HTTPClient) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

func modelPath(model, version string) string {
	p := "/v2/models/" + url.PathEscape(model)
	if version != "" {
		p += "/versions/" + url.PathEscape(version)
	}
	return p
}

// health GETs a health endpoint: 200 is true, 4xx false.
func (c *HTTPClient) health(ctx context.Context, path string) (bool, error) {
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return false, err
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusOK:
		return true, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return false, nil
	}
	return false, c.errorOf(resp)
}

func (c *HTTPClient) Live(ctx context.Context) (bool, error) {
	return c.health(ctx, "/v2/health/live")
}
func (c *HTTPClient) Ready(ctx context.Context) (bool, error) {
	return c.health(ctx, "/v2/health/ready")
}
func (c *HTTPClient) ModelReady(ctx context.Context, model, version string) (bool, error) {
	return c.health(ctx, modelPath(model, version)+"/ready")
}

func (c *HTTPClient) ServerMetadata(ctx context.Context) (*ServerMetadata, error) {
	var m ServerMetadata
	return &m, c.getJSON(ctx, "/v2", &m)
}

func (c *HTTPClient) ModelMetadata(ctx context.Context, model, version string) (*ModelMetadata, error) {
	var m ModelMetadata
	return &m, c.getJSON(ctx, modelPath(model, version), &m)
}

func (c *HTTPClient) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return c.errorOf(resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, c.opts.MaxResponseBytes)).Decode(v)
}

func (c *HTTPClient) do(ctx context.Context, method, path string, header http.Header, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return c.hc.Do(req)
}

// drain reads what is left of a small body so the connection can be reused.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// errorOf reads a server's {"error": "..."} answer.
func (c *HTTPClient) errorOf(resp *http.Response) error {
	var e struct {
		Error string `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(b))
	}
	return &Error{HTTPStatus: resp.StatusCode, Msg: e.Error}
}

type httpTensor struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data,omitempty"`
}

type httpOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// Infer sends req and returns the server's answer.
func (c *HTTPClient) Infer(ctx context.Context, req *InferRequest) (*InferResponse, error) {
	head := struct {
		ID         string         `json:"id,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
		Inputs     []httpTensor   `json:"inputs"`
		Outputs    []httpOutput   `json:"outputs,omitempty"`
	}{ID: req.ID, Parameters: map[string]any{}}
	if req.TimeoutMicros > 0 {
		head.Parameters["timeout"] = req.TimeoutMicros
	}
	var binary [][]byte
	size := int64(0)
	for _, t := range req.Inputs {
		ht := httpTensor{Name: t.Name, Shape: t.Shape, Datatype: t.Datatype}
		if t.Region != nil {
			ht.Parameters = t.Region.jsonParams()
		} else if c.opts.JSON {
			d, err := jsonData(t)
			if err != nil {
				return nil, err
			}
			ht.Data = d
		} else {
			ht.Parameters = map[string]any{"binary_data_size": len(t.Data)}
			binary = append(binary, t.Data)
			size += int64(len(t.Data))
		}
		head.Inputs = append(head.Inputs, ht)
	}
	if !c.opts.JSON {
		head.Parameters["binary_data_output"] = true
	}
	for _, name := range outputNames(req) {
		o := httpOutput{Name: name}
		if r, ok := req.OutputRegions[name]; ok {
			o.Parameters = r.jsonParams()
		}
		head.Outputs = append(head.Outputs, o)
	}
	hb, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+modelPath(req.Model, req.Version)+"/infer", newTensorBody(append([][]byte{hb}, binary...)...))
	if err != nil {
		return nil, err
	}
	hr.ContentLength = int64(len(hb)) + size
	if c.opts.JSON {
		hr.Header.Set("Content-Type", "application/json")
	} else {
		hr.Header.Set("Content-Type", "application/octet-stream")
		hr.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(hb)))
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, c.errorOf(resp)
	}
	return c.readInfer(resp, req.OutputRegions)
}

// readInfer decodes an inference response: a JSON object, followed by the
// outputs' binary data when Inference-Header-Content-Length is set. An
// output asked for in regions carries no data: like Triton, a server need not
// name the region in its answer, so the request's region is the answer's.
func (c *HTTPClient) readInfer(resp *http.Response, regions map[string]Region) (*InferResponse, error) {
	body := io.LimitReader(resp.Body, c.opts.MaxResponseBytes)
	var head []byte
	var err error
	if v := resp.Header.Get("Inference-Header-Content-Length"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 || n > c.opts.MaxResponseBytes {
			return nil, fmt.Errorf("client: bad Inference-Header-Content-Length %q", v)
		}
		head = make([]byte, n)
		_, err = io.ReadFull(body, head)
	} else {
		head, err = io.ReadAll(body)
	}
	if err != nil {
		return nil, fmt.Errorf("client: reading the response: %w", err)
	}
	var j struct {
		ModelName    string       `json:"model_name"`
		ModelVersion string       `json:"model_version"`
		ID           string       `json:"id"`
		Outputs      []httpTensor `json:"outputs"`
	}
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("client: response JSON: %w", err)
	}
	r := &InferResponse{ModelName: j.ModelName, ModelVersion: j.ModelVersion, ID: j.ID}
	for _, o := range j.Outputs {
		t := Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		if t.Region, err = answeredRegion(o.Name, regions, o.Parameters); err != nil {
			return nil, err
		}
		if t.Region != nil {
			r.Outputs = append(r.Outputs, t)
			continue
		}
		if v, ok := o.Parameters["binary_data_size"]; ok {
			n, err := v.(json.Number).Int64()
			if err != nil || n < 0 || n > c.opts.MaxResponseBytes {
				return nil, fmt.Errorf("client: output %q: bad binary_data_size %v", o.Name, v)
			}
			t.Data = make([]byte, n)
			if _, err := io.ReadFull(body, t.Data); err != nil {
				return nil, fmt.Errorf("client: output %q: reading %d bytes of binary data: %w", o.Name, n, err)
			}
		} else if t.Data, err = fromJSONData(o); err != nil {
			return nil, err
		}
		r.Outputs = append(r.Outputs, t)
	}
	return r, nil
}

// jsonData turns a tensor's bytes into JSON numbers.
func jsonData(t Tensor) (any, error) {
	switch t.Datatype {
	case "FP32":
		v := make([]json.Number, len(t.Data)/4)
		for i := range v {
			v[i] = json.Number(strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))), 'g', -1, 32))
		}
		return v, nil
	case "UINT8":
		v := make([]int, len(t.Data))
		for i, b := range t.Data {
			v[i] = int(b)
		}
		return v, nil
	}
	return nil, fmt.Errorf("client: %s tensors cannot be sent as JSON; use binary data", t.Datatype)
}

// fromJSONData flattens an output's JSON numbers into little-endian bytes.
func fromJSONData(o httpTensor) ([]byte, error) {
	var flat []json.Number
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case json.Number:
			flat = append(flat, x)
		default:
			return fmt.Errorf("client: output %q: unexpected %T in data", o.Name, v)
		}
		return nil
	}
	if err := walk(o.Data); err != nil {
		return nil, err
	}
	if o.Datatype != "FP32" {
		return nil, fmt.Errorf("client: output %q: JSON data of %s not supported", o.Name, o.Datatype)
	}
	b := make([]byte, 0, 4*len(flat))
	for _, n := range flat {
		f, err := strconv.ParseFloat(string(n), 32)
		if err != nil {
			return nil, fmt.Errorf("client: output %q: %v", o.Name, err)
		}
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	}
	return b, nil
}
