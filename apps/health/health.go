// Package health holds health_companion, the doctor-booking app of the
// paper's inadvertent-data-exposure case study. It receives the user's health
// details by design and keeps each appointment in its own per-user data.
//
// It must never send those details anywhere: it has no egress, and what it
// returns is typed (the doctor and time slot are enums, the symptoms are
// never echoed), so a result that crosses to another app carries no health
// detail beyond the name, date and city the user gave.
package health

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/secgpt/secgpt/apps"
)

const (
	bookFunction = "book_appointment"
	// appointments is the collection of booked appointments, keyed by reference.
	appointments = "appointments"
)

const bookRequest = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 100, "description": "Patient's full name."},
    "date_of_birth": {"type": "string", "minLength": 1, "maxLength": 40, "description": "Patient's date of birth."},
    "symptoms": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Symptoms and medical history relevant to the visit."},
    "date": {"type": "string", "minLength": 1, "maxLength": 40, "description": "Requested appointment date."},
    "city": {"type": "string", "minLength": 1, "maxLength": 100, "description": "City where the patient wants to be seen."},
    "email": {"type": "string", "maxLength": 254, "pattern": "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", "description": "Patient's email address for the confirmation."}
  },
  "required": ["name", "date", "city"],
  "additionalProperties": false
}`

const bookResponse = `{
  "type": "object",
  "properties": {
    "reference": {"type": "string", "maxLength": 11, "pattern": "^HC-[0-9A-F]{8}$"},
    "name": {"type": "string", "maxLength": 100},
    "date": {"type": "string", "maxLength": 40},
    "time": {"type": "string", "enum": ["09:00", "10:30", "13:00", "14:30", "16:00"]},
    "city": {"type": "string", "maxLength": 100},
    "doctor": {"type": "string", "enum": ["Dr. Amara Patel (cardiology)", "Dr. Lena Hoffmann (pulmonology)", "Dr. Kenji Mori (neurology)", "Dr. Sofia Reyes (general practice)"]}
  },
  "required": ["reference", "name", "date", "time", "city", "doctor"],
  "additionalProperties": false
}`

// slots are the bookable times, in the order of the response schema's enum.
var slots = []string{"09:00", "10:30", "13:00", "14:30", "16:00"}

// specialists maps symptom keywords to a doctor; the first entry with a
// matching keyword wins, and generalPractitioner takes the rest.
var specialists = []struct {
	doctor   string
	keywords []string
}{
	{"Dr. Amara Patel (cardiology)", []string{"heart", "cardiac", "hypertension", "blood pressure", "chest pain", "palpitation"}},
	{"Dr. Lena Hoffmann (pulmonology)", []string{"asthma", "breath", "lung", "cough", "wheez"}},
	{"Dr. Kenji Mori (neurology)", []string{"headache", "migraine", "dizz", "numb", "seizure"}},
}

const generalPractitioner = "Dr. Sofia Reyes (general practice)"

type app struct{ spec apps.Spec }

var _ apps.App = (*app)(nil)

var healthCompanion = &app{spec: apps.Spec{
	Name:        "health_companion",
	Version:     "1.0.0",
	Description: "health_companion books doctor's appointments using the user's health information to find the most suitable specialist.",
	Functions: []apps.Function{{
		Name: bookFunction,
		Description: "Books a doctor's appointment in the given city on the given date, " +
			"choosing the specialist from the symptoms. Returns the booking reference, time and doctor.",
		Request:      json.RawMessage(bookRequest),
		Response:     json.RawMessage(bookResponse),
		Irreversible: true,
	}},
	Profile: apps.ProfileStrict,
}}

func init() { apps.Register(healthCompanion) }

// Spec returns the app's declaration.
func (a *app) Spec() apps.Spec { return a.spec }

// bookingRequest is the arguments of book_appointment.
type bookingRequest struct {
	Name        string `json:"name"`
	DateOfBirth string `json:"date_of_birth,omitempty"`
	Symptoms    string `json:"symptoms,omitempty"`
	Date        string `json:"date"`
	City        string `json:"city"`
	Email       string `json:"email,omitempty"`
}

// appointment is what the app stores: the whole request and the booking.
type appointment struct {
	Reference string `json:"reference"`
	bookingRequest
	Time   string `json:"time"`
	Doctor string `json:"doctor"`
}

// Call runs book_appointment. Booking is idempotent: the same request gets
// the same reference, slot and doctor, and replaces its stored appointment.
func (a *app) Call(ctx context.Context, env apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	if function != bookFunction {
		return nil, fmt.Errorf("app %s has no function %q", a.spec.Name, function)
	}
	var req bookingRequest
	if err := json.Unmarshal(args, &req); err != nil {
		return nil, fmt.Errorf("failed to decode %s arguments: %w", bookFunction, err)
	}
	// Hash the decoded request, not the argument text, so that spacing or
	// key order does not change the booking.
	sum, err := apps.Digest(req)
	if err != nil {
		return nil, err
	}
	appt := appointment{
		Reference:      "HC-" + strings.ToUpper(hex.EncodeToString(sum[:4])),
		bookingRequest: req,
		Time:           slots[int(sum[4])%len(slots)],
		Doctor:         doctorFor(req.Symptoms),
	}
	if err := apps.PutJSON(ctx, env.Data(), appointments, appt.Reference, appt); err != nil {
		return nil, err
	}
	env.Log().Info().Str("reference", appt.Reference).Msg("Booked appointment")

	result, err := json.Marshal(struct {
		Reference string `json:"reference"`
		Name      string `json:"name"`
		Date      string `json:"date"`
		Time      string `json:"time"`
		City      string `json:"city"`
		Doctor    string `json:"doctor"`
	}{appt.Reference, appt.Name, appt.Date, appt.Time, appt.City, appt.Doctor})
	if err != nil {
		return nil, fmt.Errorf("failed to encode booking result: %w", err)
	}
	return result, nil
}

// doctorFor picks the specialist for the symptoms.
func doctorFor(symptoms string) string {
	s := strings.ToLower(symptoms)
	for _, sp := range specialists {
		for _, k := range sp.keywords {
			if strings.Contains(s, k) {
				return sp.doctor
			}
		}
	}
	return generalPractitioner
}
