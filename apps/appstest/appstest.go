// Package appstest holds fakes of what the hub gives an app while it runs:
// an in-memory DataStore that honours the ErrNotFound and newest-first
// contracts, an HTTP client that refuses every request, and a logger that
// writes to a buffer. It is for tests only and must never be imported by
// production code.
package appstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/secgpt/secgpt/apps"
)

// ErrEgressRefused is returned by every request made through Env.HTTP: the
// fake has no egress broker, so no app may reach the network in a test.
var ErrEgressRefused = errors.New("egress refused by appstest")

// Env is a fake apps.Env for one (user, app).
type Env struct {
	store  *Store
	client *http.Client
	refuse *refusingTransport
	logs   *lockedBuffer
	log    zerolog.Logger
}

var _ apps.Env = (*Env)(nil)

// NewEnv returns an Env with an empty store.
func NewEnv() *Env {
	logs := &lockedBuffer{}
	refuse := &refusingTransport{}
	return &Env{
		store:  NewStore(),
		client: &http.Client{Transport: refuse},
		refuse: refuse,
		logs:   logs,
		log:    zerolog.New(logs).With().Timestamp().Logger(),
	}
}

// Data returns the Env's store.
func (e *Env) Data() apps.DataStore { return e.store }

// Store returns the Env's store with its concrete type, for seeding.
func (e *Env) Store() *Store { return e.store }

// HTTP returns a client whose transport refuses every request with
// ErrEgressRefused.
func (e *Env) HTTP() *http.Client { return e.client }

// SetHTTP replaces the refusing client, for an app test that serves the
// app's upstream itself (an httptest server behind the given transport).
func (e *Env) SetHTTP(c *http.Client) { e.client = c }

// Log returns the logger that writes to the Env's log buffer.
func (e *Env) Log() *zerolog.Logger { return &e.log }

// Logs returns everything logged so far, one JSON object per line.
func (e *Env) Logs() string { return e.logs.String() }

// RefusedRequests returns the URLs of the requests the HTTP client refused,
// in order, so that a test can assert an app never tried the network.
func (e *Env) RefusedRequests() []string { return e.refuse.urls() }

type refusingTransport struct {
	mu      sync.Mutex
	refused []string
}

func (t *refusingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.refused = append(t.refused, req.URL.String())
	t.mu.Unlock()
	if req.Body != nil {
		_ = req.Body.Close() // a RoundTripper must close the body, even on error
	}
	return nil, fmt.Errorf("failed to send %s %s: %w", req.Method, req.URL.Redacted(), ErrEgressRefused)
}

func (t *refusingTransport) urls() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.refused...)
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Store is an in-memory apps.DataStore. Every write stamps the document
// with a logical clock that advances one millisecond per write, so List's
// newest-first order is the order of writes, also within one real instant.
type Store struct {
	mu    sync.Mutex
	now   time.Time
	colls map[string]map[string]apps.Doc
}

var _ apps.DataStore = (*Store)(nil)

// storeEpoch is where the logical clock starts; any fixed instant would do.
var storeEpoch = time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{now: storeEpoch, colls: map[string]map[string]apps.Doc{}}
}

// Get returns one document, or apps.ErrNotFound.
func (s *Store) Get(ctx context.Context, collection, id string) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.colls[collection][id]
	if !ok {
		return nil, fmt.Errorf("failed to get %s/%s: %w", collection, id, apps.ErrNotFound)
	}
	return bytes.Clone(d.Body), nil
}

// Put creates or replaces a document; a replaced document becomes the newest.
func (s *Store) Put(ctx context.Context, collection, id string, body json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if collection == "" || id == "" {
		return fmt.Errorf("failed to put document: collection and id must not be empty")
	}
	if !json.Valid(body) {
		return fmt.Errorf("failed to put %s/%s: body is not valid JSON", collection, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(time.Millisecond)
	if s.colls[collection] == nil {
		s.colls[collection] = map[string]apps.Doc{}
	}
	s.colls[collection][id] = apps.Doc{ID: id, Body: bytes.Clone(body), Updated: s.now}
	return nil
}

// Delete removes a document, or returns apps.ErrNotFound.
func (s *Store) Delete(ctx context.Context, collection, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.colls[collection][id]; !ok {
		return fmt.Errorf("failed to delete %s/%s: %w", collection, id, apps.ErrNotFound)
	}
	delete(s.colls[collection], id)
	return nil
}

// List returns up to limit documents, newest first. A limit below 1 is an
// error here, so that a test catches an app relying on an undocumented
// meaning of it.
func (s *Store) List(ctx context.Context, collection string, limit int) ([]apps.Doc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("failed to list %s: limit %d is below 1", collection, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]apps.Doc, 0, len(s.colls[collection]))
	for _, d := range s.colls[collection] {
		d.Body = bytes.Clone(d.Body)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Updated.After(out[j].Updated) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Seed stores docs in collection in the order given, so the last is the
// newest. Each doc is marshalled to JSON and must have a non-empty string
// field "id", which becomes its document ID.
func (s *Store) Seed(t testing.TB, collection string, docs ...any) {
	t.Helper()
	for i, doc := range docs {
		body, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("seed %s[%d]: %v", collection, i, err)
		}
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &head); err != nil || head.ID == "" {
			t.Fatalf("seed %s[%d]: document needs a string id (err %v)", collection, i, err)
		}
		if err := s.Put(context.Background(), collection, head.ID, body); err != nil {
			t.Fatalf("seed %s[%d]: %v", collection, i, err)
		}
	}
}

// FixtureEnvs parses a fixture in the store's seed shape,
// `app: {collection: [doc, ...]}`, and returns one seeded Env per app.
// Within a collection, docs are stored in file order: the last is the newest.
func FixtureEnvs(t testing.TB, fixture []byte) map[string]*Env {
	t.Helper()
	var parsed map[string]map[string][]map[string]any
	if err := yaml.Unmarshal(fixture, &parsed); err != nil {
		t.Fatalf("parse fixture: %v", err)
	}
	envs := make(map[string]*Env, len(parsed))
	for app, colls := range parsed {
		env := NewEnv()
		names := make([]string, 0, len(colls))
		for name := range colls {
			names = append(names, name)
		}
		sort.Strings(names) // seed collections in a stable order
		for _, name := range names {
			docs := make([]any, len(colls[name]))
			for i, d := range colls[name] {
				docs[i] = d
			}
			env.store.Seed(t, name, docs...)
		}
		envs[app] = env
	}
	return envs
}
