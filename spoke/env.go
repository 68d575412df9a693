package spoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
)

// maxHTTPBody bounds a request body an app may hand to the egress broker.
const maxHTTPBody = 512 << 10

// childEnv is an app's Env inside a spoke: every method crosses ISC to the
// hub, which scopes it to this spoke's (user, app).
type childEnv struct {
	rt   *runtime
	log  zerolog.Logger
	http *http.Client
}

var _ apps.Env = (*childEnv)(nil)

func newChildEnv(rt *runtime) *childEnv {
	return &childEnv{
		rt:  rt,
		log: rt.log.With().Str("component", "app").Logger(),
		http: &http.Client{
			Transport: brokerTransport{rt: rt},
			// The broker follows and checks redirects itself.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       60 * time.Second,
		},
	}
}

func (e *childEnv) Data() apps.DataStore { return iscData{rt: e.rt} }
func (e *childEnv) HTTP() *http.Client   { return e.http }
func (e *childEnv) Log() *zerolog.Logger { return &e.log }

// iscData is the app's data store, brokered by the hub.
type iscData struct{ rt *runtime }

var _ apps.DataStore = iscData{}

func (d iscData) do(op DataOp) (DataReply, error) {
	var reply DataReply
	if err := d.rt.request(KindData, op, &reply); err != nil {
		return DataReply{}, fmt.Errorf("failed to %s data: %w", op.Op, err)
	}
	if reply.NotFound {
		return DataReply{}, apps.ErrNotFound
	}
	return reply, nil
}

func (d iscData) Get(_ context.Context, collection, id string) (json.RawMessage, error) {
	r, err := d.do(DataOp{Op: DataGet, Collection: collection, ID: id})
	return r.Body, err
}

func (d iscData) Put(_ context.Context, collection, id string, body json.RawMessage) error {
	_, err := d.do(DataOp{Op: DataPut, Collection: collection, ID: id, Body: body})
	return err
}

func (d iscData) Delete(_ context.Context, collection, id string) error {
	_, err := d.do(DataOp{Op: DataDelete, Collection: collection, ID: id})
	return err
}

func (d iscData) List(_ context.Context, collection string, limit int) ([]apps.Doc, error) {
	r, err := d.do(DataOp{Op: DataList, Collection: collection, Limit: limit})
	return r.Docs, err
}

// brokerTransport sends each HTTP request to the hub's egress broker.
type brokerTransport struct{ rt *runtime }

var _ http.RoundTripper = brokerTransport{}

func (t brokerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxHTTPBody+1))
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("failed to read request body: %w", err)
		}
		if len(b) > maxHTTPBody {
			return nil, errors.New("request body over the egress limit")
		}
		body = b
	}
	var resp HTTPResponse
	err := t.rt.request(KindHTTP, HTTPRequest{Method: req.Method, URL: req.URL.String(), Header: req.Header, Body: body}, &resp)
	if err != nil {
		return nil, fmt.Errorf("egress refused: %w", err)
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", resp.Status, http.StatusText(resp.Status)),
		StatusCode:    resp.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header(resp.Header),
		Body:          io.NopCloser(bytes.NewReader(resp.Body)),
		ContentLength: int64(len(resp.Body)),
		Request:       req,
	}, nil
}
