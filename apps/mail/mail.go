// Package mail holds the apps over the user's simulated mailbox and drive,
// kept in each app's per-user data: email (read, search, send, delete) and
// drive (search documents). They serve the paper's data-stealing case study,
// whose attack email is in package casestudy's mailbox fixture.
//
// Email bodies and documents are third-party text. These apps return them as
// data and must never act on what they say; refusing a call that an injected
// instruction asks for is the hub's job.
package mail

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/secgpt/secgpt/apps"
)

// Collections of the email app.
const (
	inbox = "inbox"
	sent  = "sent"
	trash = "trash"
)

// files is the drive app's one collection.
const files = "files"

// Bounds on the fields of a result. Stored documents may be longer (seeded
// data is not validated), so results clip them to these.
const (
	maxID      = 64
	maxAddress = 254
	maxSubject = 200
	maxDate    = 40
	maxBody    = 4000
	maxName    = 200
	maxContent = 2000
)

// Bounds on a search.
const (
	// searchScan is how many of the newest documents a search looks at.
	searchScan = 500
	// defaultEmailLimit is search_email's limit when the request has none.
	defaultEmailLimit = 10
	// maxFileResults is how many files search_files returns at most.
	maxFileResults = 5
)

// sender is the From of a sent email: the user, as the mailbox knows them.
const sender = "me"

const (
	readRequest = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "ID of the inbox email; the newest email when absent."}
  },
  "additionalProperties": false
}`
	messageResponse = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "maxLength": 64},
    "from": {"type": "string", "maxLength": 254},
    "to": {"type": "string", "maxLength": 254},
    "subject": {"type": "string", "maxLength": 200},
    "date": {"type": "string", "maxLength": 40},
    "body": {"type": "string", "maxLength": 4000}
  },
  "required": ["id", "from", "to", "subject", "date", "body"],
  "additionalProperties": false
}`
	searchEmailRequest = `{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Text to find in the sender, subject or body, ignoring case."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Most messages to return; 10 when absent."}
  },
  "required": ["query"],
  "additionalProperties": false
}`
	searchEmailResponse = `{
  "type": "object",
  "properties": {
    "messages": {
      "type": "array",
      "maxItems": 20,
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string", "maxLength": 64},
          "from": {"type": "string", "maxLength": 254},
          "subject": {"type": "string", "maxLength": 200},
          "date": {"type": "string", "maxLength": 40}
        },
        "required": ["id", "from", "subject", "date"],
        "additionalProperties": false
      }
    }
  },
  "required": ["messages"],
  "additionalProperties": false
}`
	sendRequest = `{
  "type": "object",
  "properties": {
    "to": {"type": "string", "maxLength": 254, "pattern": "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", "description": "Recipient's email address."},
    "subject": {"type": "string", "maxLength": 200},
    "body": {"type": "string", "maxLength": 4000}
  },
  "required": ["to", "subject", "body"],
  "additionalProperties": false
}`
	sendResponse = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "maxLength": 64},
    "status": {"type": "string", "enum": ["sent"]}
  },
  "required": ["id", "status"],
  "additionalProperties": false
}`
	deleteRequest = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "ID of the inbox email to delete."}
  },
  "required": ["id"],
  "additionalProperties": false
}`
	deleteResponse = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "maxLength": 64},
    "status": {"type": "string", "enum": ["deleted"]}
  },
  "required": ["id", "status"],
  "additionalProperties": false
}`
	searchFilesRequest = `{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Text to find in a document's name or content, ignoring case."}
  },
  "required": ["query"],
  "additionalProperties": false
}`
	searchFilesResponse = `{
  "type": "object",
  "properties": {
    "files": {
      "type": "array",
      "maxItems": 5,
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string", "maxLength": 64},
          "name": {"type": "string", "maxLength": 200},
          "content": {"type": "string", "maxLength": 2000}
        },
        "required": ["id", "name", "content"],
        "additionalProperties": false
      }
    }
  },
  "required": ["files"],
  "additionalProperties": false
}`
)

// message is an email as the email app stores and returns it.
type message struct {
	ID      string `json:"id"`
	From    string `json:"from"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Date    string `json:"date"`
	Body    string `json:"body"`
}

// clipped returns m with every field cut to its result bound.
func (m message) clipped() message {
	return message{
		ID:      clip(m.ID, maxID),
		From:    clip(m.From, maxAddress),
		To:      clip(m.To, maxAddress),
		Subject: clip(m.Subject, maxSubject),
		Date:    clip(m.Date, maxDate),
		Body:    clip(m.Body, maxBody),
	}
}

// file is a drive document.
type file struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Content string `json:"content"`
}

type emailApp struct{ spec apps.Spec }

var _ apps.App = (*emailApp)(nil)

var email = &emailApp{spec: apps.Spec{
	Name:        "email",
	Version:     "1.0.0",
	Description: "email reads, searches, sends and deletes the user's email.",
	Functions: []apps.Function{
		{
			Name:        "read_email",
			Description: "Returns the inbox email with the given id, or the newest inbox email when no id is given.",
			Request:     json.RawMessage(readRequest),
			Response:    json.RawMessage(messageResponse),
		},
		{
			Name:        "search_email",
			Description: "Finds inbox emails whose sender, subject or body contains the query, ignoring case, newest first.",
			Request:     json.RawMessage(searchEmailRequest),
			Response:    json.RawMessage(searchEmailResponse),
		},
		{
			Name:         "send_email",
			Description:  "Sends an email from the user to one recipient.",
			Request:      json.RawMessage(sendRequest),
			Response:     json.RawMessage(sendResponse),
			Irreversible: true,
		},
		{
			Name:         "delete_email",
			Description:  "Moves the inbox email with the given id to the trash.",
			Request:      json.RawMessage(deleteRequest),
			Response:     json.RawMessage(deleteResponse),
			Irreversible: true,
		},
	},
	Profile: apps.ProfileStrict,
}}

type driveApp struct{ spec apps.Spec }

var _ apps.App = (*driveApp)(nil)

var drive = &driveApp{spec: apps.Spec{
	Name:        "drive",
	Version:     "1.0.0",
	Description: "drive searches the user's documents.",
	Functions: []apps.Function{{
		Name:        "search_files",
		Description: "Finds up to 5 documents whose name or content contains the query, ignoring case, newest first.",
		Request:     json.RawMessage(searchFilesRequest),
		Response:    json.RawMessage(searchFilesResponse),
	}},
	Profile: apps.ProfileStrict,
}}

func init() {
	apps.Register(email)
	apps.Register(drive)
}

// Spec returns the app's declaration.
func (a *emailApp) Spec() apps.Spec { return a.spec }

// Call runs one of the email functions. A missing email (read_email or
// delete_email of an unknown id, read_email of an empty inbox) is an error
// wrapping apps.ErrNotFound.
func (a *emailApp) Call(ctx context.Context, env apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	var result any
	var err error
	switch function {
	case "read_email":
		var req struct {
			ID string `json:"id"`
		}
		if err = decode(function, args, &req); err == nil {
			result, err = readEmail(ctx, env.Data(), req.ID)
		}
	case "search_email":
		var req struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		if err = decode(function, args, &req); err == nil {
			result, err = searchEmail(ctx, env.Data(), req.Query, req.Limit)
		}
	case "send_email":
		var req struct {
			To      string `json:"to"`
			Subject string `json:"subject"`
			Body    string `json:"body"`
		}
		if err = decode(function, args, &req); err == nil {
			result, err = sendEmail(ctx, env, req.To, req.Subject, req.Body)
		}
	case "delete_email":
		var req struct {
			ID string `json:"id"`
		}
		if err = decode(function, args, &req); err == nil {
			result, err = deleteEmail(ctx, env, req.ID)
		}
	default:
		return nil, fmt.Errorf("app %s has no function %q", a.spec.Name, function)
	}
	if err != nil {
		return nil, err
	}
	return encode(function, result)
}

func readEmail(ctx context.Context, data apps.DataStore, id string) (message, error) {
	if id == "" {
		docs, err := data.List(ctx, inbox, 1)
		if err != nil {
			return message{}, fmt.Errorf("failed to list inbox: %w", err)
		}
		if len(docs) == 0 {
			return message{}, fmt.Errorf("failed to read the newest email: the inbox is empty: %w", apps.ErrNotFound)
		}
		return decodeMessage(docs[0].ID, docs[0].Body)
	}
	body, err := data.Get(ctx, inbox, id)
	if err != nil {
		return message{}, fmt.Errorf("failed to read email %q: %w", id, err)
	}
	return decodeMessage(id, body)
}

type messageSummary struct {
	ID      string `json:"id"`
	From    string `json:"from"`
	Subject string `json:"subject"`
	Date    string `json:"date"`
}

func searchEmail(ctx context.Context, data apps.DataStore, query string, limit int) (any, error) {
	if limit <= 0 {
		limit = defaultEmailLimit
	}
	docs, err := data.List(ctx, inbox, searchScan)
	if err != nil {
		return nil, fmt.Errorf("failed to list inbox: %w", err)
	}
	q := strings.ToLower(query)
	found := []messageSummary{}
	for _, d := range docs {
		if len(found) == limit {
			break
		}
		m, err := decodeMessage(d.ID, d.Body)
		if err != nil {
			return nil, err
		}
		if !containsFold(q, m.From, m.Subject, m.Body) {
			continue
		}
		found = append(found, messageSummary{ID: m.ID, From: m.From, Subject: m.Subject, Date: m.Date})
	}
	return struct {
		Messages []messageSummary `json:"messages"`
	}{found}, nil
}

type status struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func sendEmail(ctx context.Context, env apps.Env, to, subject, body string) (status, error) {
	m := message{
		// A random ID, so that sending the same text twice keeps both.
		ID:      "sent-" + rand.Text(),
		From:    sender,
		To:      to,
		Subject: subject,
		Date:    time.Now().UTC().Format(time.RFC3339),
		Body:    body,
	}
	if err := apps.PutJSON(ctx, env.Data(), sent, m.ID, m); err != nil {
		return status{}, err
	}
	env.Log().Info().Str("email_id", m.ID).Msg("Sent email")
	return status{ID: m.ID, Status: "sent"}, nil
}

// deleteEmail moves an inbox email to the trash. It writes the trash copy
// first, so that a failure in between leaves the email in both places rather
// than in neither.
func deleteEmail(ctx context.Context, env apps.Env, id string) (status, error) {
	data := env.Data()
	body, err := data.Get(ctx, inbox, id)
	if err != nil {
		return status{}, fmt.Errorf("failed to delete email %q: %w", id, err)
	}
	if err := data.Put(ctx, trash, id, body); err != nil {
		return status{}, fmt.Errorf("failed to move email %q to trash: %w", id, err)
	}
	if err := data.Delete(ctx, inbox, id); err != nil {
		return status{}, fmt.Errorf("failed to delete email %q from inbox: %w", id, err)
	}
	env.Log().Info().Str("email_id", id).Msg("Deleted email")
	return status{ID: id, Status: "deleted"}, nil
}

// Spec returns the app's declaration.
func (a *driveApp) Spec() apps.Spec { return a.spec }

// Call runs search_files.
func (a *driveApp) Call(ctx context.Context, env apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	if function != "search_files" {
		return nil, fmt.Errorf("app %s has no function %q", a.spec.Name, function)
	}
	var req struct {
		Query string `json:"query"`
	}
	if err := decode(function, args, &req); err != nil {
		return nil, err
	}
	docs, err := env.Data().List(ctx, files, searchScan)
	if err != nil {
		return nil, fmt.Errorf("failed to list files: %w", err)
	}
	q := strings.ToLower(req.Query)
	found := []file{}
	for _, d := range docs {
		if len(found) == maxFileResults {
			break
		}
		var f file
		if err := json.Unmarshal(d.Body, &f); err != nil {
			return nil, fmt.Errorf("failed to decode file %q: %w", d.ID, err)
		}
		if !containsFold(q, f.Name, f.Content) {
			continue
		}
		found = append(found, file{ID: clip(d.ID, maxID), Name: clip(f.Name, maxName), Content: clip(f.Content, maxContent)})
	}
	return encode(function, struct {
		Files []file `json:"files"`
	}{found})
}

// decodeMessage decodes a stored email, clipped to the result bounds. The
// document ID is authoritative over any id inside the body.
func decodeMessage(id string, body json.RawMessage) (message, error) {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return message{}, fmt.Errorf("failed to decode email %q: %w", id, err)
	}
	m.ID = id
	return m.clipped(), nil
}

// containsFold reports whether any of fields contains lowerQuery, ignoring case.
func containsFold(lowerQuery string, fields ...string) bool {
	for _, f := range fields {
		if strings.Contains(strings.ToLower(f), lowerQuery) {
			return true
		}
	}
	return false
}

// clip cuts s to at most n characters, counted as JSON Schema's maxLength
// counts them (code points).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func decode(function string, args json.RawMessage, into any) error {
	if err := json.Unmarshal(args, into); err != nil {
		return fmt.Errorf("failed to decode %s arguments: %w", function, err)
	}
	return nil
}

func encode(function string, result any) (json.RawMessage, error) {
	b, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("failed to encode %s result: %w", function, err)
	}
	return b, nil
}
