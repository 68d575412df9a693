package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"
)

// MaxFixtureBytes bounds a fixture file.
const MaxFixtureBytes = 64 << 20

// fixtureDoc is one document read from a fixture.
type fixtureDoc struct {
	app, collection, id string
	body                json.RawMessage
}

// SeedFixture loads documents for user from a YAML or JSON fixture of the
// shape
//
//	app_name: { collection: [ {id: "...", <any other fields>}, ... ] }
//
// Each element becomes a document with its "id" (a string) as ID and the
// whole element, id included, as body. Elements are put in file order, so
// the last of a collection lists as the newest. Documents with the same ID
// already stored are replaced. Everything is written in one transaction,
// after the whole file has been checked; a malformed file writes nothing and
// the error names the place in the file. It returns how many documents it
// put.
func (s *Store) SeedFixture(ctx context.Context, user string, r io.Reader) (int, error) {
	if err := checkName("user", user); err != nil {
		return 0, fmt.Errorf("failed to seed fixture: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxFixtureBytes+1))
	if err != nil {
		return 0, fmt.Errorf("failed to read fixture: %w", err)
	}
	if len(data) > MaxFixtureBytes {
		return 0, fmt.Errorf("failed to seed fixture: %w: larger than %d bytes", ErrInvalid, MaxFixtureBytes)
	}
	var docs []fixtureDoc
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		docs, err = parseJSONFixture(trimmed)
	} else {
		docs, err = parseYAMLFixture(data)
	}
	if err != nil {
		return 0, fmt.Errorf("failed to seed fixture: %w: %w", ErrInvalid, err)
	}
	if err := checkFixtureDocs(user, docs); err != nil {
		return 0, fmt.Errorf("failed to seed fixture: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context) error {
		for _, d := range docs {
			if err := s.putDoc(ctx, user, d.app, d.collection, d.id, d.body); err != nil {
				return fmt.Errorf("failed to put %s: %w", fixturePath(d.app, d.collection, d.id), err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("failed to seed fixture: %w", err)
	}
	return len(docs), nil
}

// checkFixtureDocs validates every document and rejects repeated IDs.
func checkFixtureDocs(user string, docs []fixtureDoc) error {
	seen := make(map[[3]string]bool, len(docs))
	for _, d := range docs {
		if err := checkDoc(user, d.app, d.collection, d.id, d.body); err != nil {
			return fmt.Errorf("at %s: %w", fixturePath(d.app, d.collection, d.id), err)
		}
		key := [3]string{d.app, d.collection, d.id}
		if seen[key] {
			return fmt.Errorf("%w: at %s: document ID repeated", ErrInvalid, fixturePath(d.app, d.collection, d.id))
		}
		seen[key] = true
	}
	return nil
}

func fixturePath(app, collection, id string) string {
	return app + "." + collection + "[id=" + strconv.Quote(id) + "]"
}

// parseJSONFixture reads the JSON form. Apps and collections are taken in
// name order (their order does not matter); elements in file order.
func parseJSONFixture(data []byte) ([]fixtureDoc, error) {
	root, err := jsonObject(data, "the top level", "a mapping of app names")
	if err != nil {
		return nil, err
	}
	var docs []fixtureDoc
	for _, app := range slices.Sorted(maps.Keys(root)) {
		collections, err := jsonObject(root[app], app, "a mapping of collection names")
		if err != nil {
			return nil, err
		}
		for _, collection := range slices.Sorted(maps.Keys(collections)) {
			path := app + "." + collection
			var elements []json.RawMessage
			if err := json.Unmarshal(collections[collection], &elements); err != nil || elements == nil {
				return nil, fmt.Errorf("at %s: want a list of documents", path)
			}
			for i, raw := range elements {
				elPath := path + "[" + strconv.Itoa(i) + "]"
				fields, err := jsonObject(raw, elPath, "a document (a mapping)")
				if err != nil {
					return nil, err
				}
				rawID, ok := fields["id"]
				if !ok {
					return nil, fmt.Errorf("at %s: missing \"id\"", elPath)
				}
				var id string
				if err := json.Unmarshal(rawID, &id); err != nil {
					return nil, fmt.Errorf("at %s.id: want a string", elPath)
				}
				var body bytes.Buffer
				if err := json.Compact(&body, raw); err != nil {
					return nil, fmt.Errorf("at %s: %w", elPath, err)
				}
				docs = append(docs, fixtureDoc{app: app, collection: collection, id: id, body: body.Bytes()})
			}
		}
	}
	return docs, nil
}

// jsonObject decodes a JSON object, refusing null and every other kind.
func jsonObject(raw json.RawMessage, path, want string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("at %s: want %s", path, want)
	}
	return m, nil
}

// parseYAMLFixture reads the YAML form, keeping file order throughout.
func parseYAMLFixture(data []byte) ([]fixtureDoc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, errors.New("empty fixture")
	} else if err != nil {
		return nil, fmt.Errorf("failed to parse fixture: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("fixture holds more than one YAML document")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("at the top level (line %d): want a mapping of app names", root.Line)
	}
	var docs []fixtureDoc
	for i := 0; i < len(root.Content); i += 2 {
		app, collections := root.Content[i], root.Content[i+1]
		if err := yamlKey(app, "the top level"); err != nil {
			return nil, err
		}
		if collections.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("at %s (line %d): want a mapping of collection names", app.Value, collections.Line)
		}
		for j := 0; j < len(collections.Content); j += 2 {
			collection, elements := collections.Content[j], collections.Content[j+1]
			if err := yamlKey(collection, app.Value); err != nil {
				return nil, err
			}
			path := app.Value + "." + collection.Value
			if elements.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("at %s (line %d): want a list of documents", path, elements.Line)
			}
			for k, el := range elements.Content {
				d, err := yamlDoc(el, path+"["+strconv.Itoa(k)+"]")
				if err != nil {
					return nil, err
				}
				d.app, d.collection = app.Value, collection.Value
				docs = append(docs, d)
			}
		}
	}
	return docs, nil
}

// yamlKey checks that a mapping key is a plain string.
func yamlKey(n *yaml.Node, path string) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return fmt.Errorf("at %s (line %d): keys must be strings", path, n.Line)
	}
	return nil
}

// yamlDoc converts one element of a collection.
func yamlDoc(el *yaml.Node, path string) (fixtureDoc, error) {
	if el.Kind != yaml.MappingNode {
		return fixtureDoc{}, fmt.Errorf("at %s (line %d): want a document (a mapping)", path, el.Line)
	}
	var d fixtureDoc
	found := false
	for i := 0; i < len(el.Content); i += 2 {
		if key, value := el.Content[i], el.Content[i+1]; key.Value == "id" && key.Kind == yaml.ScalarNode {
			if value.Kind != yaml.ScalarNode || value.ShortTag() != "!!str" {
				return fixtureDoc{}, fmt.Errorf("at %s.id (line %d): want a string", path, value.Line)
			}
			d.id, found = value.Value, true
		}
	}
	if !found {
		return fixtureDoc{}, fmt.Errorf("at %s (line %d): missing \"id\"", path, el.Line)
	}
	body, err := appendYAMLAsJSON(nil, el, path)
	if err != nil {
		return fixtureDoc{}, err
	}
	d.body = body
	return d, nil
}

// appendYAMLAsJSON appends n as JSON, keeping mapping order. Anchors and
// aliases, merge keys and tags outside YAML's core schema are refused.
func appendYAMLAsJSON(buf []byte, n *yaml.Node, path string) ([]byte, error) {
	switch n.Kind {
	case yaml.MappingNode:
		buf = append(buf, '{')
		for i := 0; i < len(n.Content); i += 2 {
			key := n.Content[i]
			if err := yamlKey(key, path); err != nil {
				return nil, err
			}
			if i > 0 {
				buf = append(buf, ',')
			}
			quoted, err := json.Marshal(key.Value)
			if err != nil {
				return nil, fmt.Errorf("at %s (line %d): %w", path, key.Line, err)
			}
			buf = append(append(buf, quoted...), ':')
			if buf, err = appendYAMLAsJSON(buf, n.Content[i+1], path+"."+key.Value); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	case yaml.SequenceNode:
		buf = append(buf, '[')
		for i, el := range n.Content {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendYAMLAsJSON(buf, el, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case yaml.ScalarNode:
		var v any
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!binary":
			// Kept as written: the store does not interpret app data.
			v = n.Value
		case "!!null", "!!bool", "!!int", "!!float":
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("at %s (line %d): %w", path, n.Line, err)
			}
		default:
			return nil, fmt.Errorf("at %s (line %d): unsupported YAML tag %s", path, n.Line, n.ShortTag())
		}
		out, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("at %s (line %d): %w", path, n.Line, err)
		}
		return append(buf, out...), nil
	default:
		return nil, fmt.Errorf("at %s (line %d): YAML anchors and aliases are not supported", path, n.Line)
	}
}
