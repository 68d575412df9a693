// Package weather is a built-in app that tells the current weather in a
// city, from Open-Meteo (open-meteo.com: free, no key). It is also the
// example of a Go app in docs/apps.md: a typed spec, one declared egress
// domain, and HTTP only through the client its Env gives it.
//
// It must never reach any host but open-meteo.com's, and it cannot: the
// hub's egress broker refuses every other one.
package weather

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/secgpt/secgpt/apps"
)

const (
	geocodingURL = "https://geocoding-api.open-meteo.com/v1/search"
	forecastURL  = "https://api.open-meteo.com/v1/forecast"
	maxBody      = 256 << 10
)

const request = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1, "maxLength": 100, "description": "The city, e.g. Paris."}
  },
  "required": ["city"],
  "additionalProperties": false
}`

// The response is typed: a model that reads it can be told numbers and a
// condition from a closed list, and nothing else.
const response = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "maxLength": 100},
    "country": {"type": "string", "maxLength": 100},
    "temperature_c": {"type": "number", "minimum": -100, "maximum": 100},
    "wind_kmh": {"type": "number", "minimum": 0, "maximum": 500},
    "conditions": {"type": "string", "enum": ["clear", "cloudy", "fog", "drizzle", "rain", "snow", "showers", "thunderstorm", "unknown"]}
  },
  "required": ["city", "country", "temperature_c", "wind_kmh", "conditions"],
  "additionalProperties": false
}`

var spec = apps.Spec{
	Name:        "weather",
	Version:     "1.0.0",
	Description: "weather tells the current temperature, wind and conditions in a city, from Open-Meteo.",
	Functions: []apps.Function{{
		Name:        "current_weather",
		Description: "The current weather in a city.",
		Request:     json.RawMessage(request),
		Response:    json.RawMessage(response),
	}},
	Egress:  []string{"open-meteo.com"},
	Profile: apps.ProfileStrict,
}

type app struct{}

var _ apps.App = app{}

func init() { apps.Register(app{}) }

func (app) Spec() apps.Spec { return spec }

// Result is what current_weather returns.
type Result struct {
	City         string  `json:"city"`
	Country      string  `json:"country"`
	TemperatureC float64 `json:"temperature_c"`
	WindKmh      float64 `json:"wind_kmh"`
	Conditions   string  `json:"conditions"`
}

func (app) Call(ctx context.Context, env apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	if function != "current_weather" {
		return nil, fmt.Errorf("weather has no function %q", function)
	}
	var in struct {
		City string `json:"city"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, fmt.Errorf("failed to decode arguments: %w", err)
	}
	client := env.HTTP()
	var places struct {
		Results []struct {
			Name      string  `json:"name"`
			Country   string  `json:"country"`
			Latitude  float64 `json:"latitude"`
			Longitude float64 `json:"longitude"`
		} `json:"results"`
	}
	q := url.Values{"name": {in.City}, "count": {"1"}, "format": {"json"}}
	if err := getJSON(ctx, client, geocodingURL+"?"+q.Encode(), &places); err != nil {
		return nil, err
	}
	if len(places.Results) == 0 {
		return nil, fmt.Errorf("no city named %q", in.City)
	}
	place := places.Results[0]
	var forecast struct {
		Current struct {
			Temperature float64 `json:"temperature_2m"`
			Wind        float64 `json:"wind_speed_10m"`
			Code        int     `json:"weather_code"`
		} `json:"current"`
	}
	q = url.Values{
		"latitude":  {strconv.FormatFloat(place.Latitude, 'f', 4, 64)},
		"longitude": {strconv.FormatFloat(place.Longitude, 'f', 4, 64)},
		"current":   {"temperature_2m,wind_speed_10m,weather_code"},
	}
	if err := getJSON(ctx, client, forecastURL+"?"+q.Encode(), &forecast); err != nil {
		return nil, err
	}
	env.Log().Info().Str("city", place.Name).Msg("Fetched weather")
	return json.Marshal(Result{
		City:         clip(place.Name),
		Country:      clip(place.Country),
		TemperatureC: math.Round(forecast.Current.Temperature*10) / 10,
		WindKmh:      math.Round(forecast.Current.Wind*10) / 10,
		Conditions:   conditions(forecast.Current.Code),
	})
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("failed to build request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("failed to reach Open-Meteo: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("Open-Meteo answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("failed to read Open-Meteo's answer: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("failed to decode Open-Meteo's answer: %w", err)
	}
	return nil
}

func clip(s string) string {
	r := []rune(s)
	if len(r) > 100 {
		return string(r[:100])
	}
	return s
}

// conditions maps a WMO weather code to the closed list of the response.
func conditions(code int) string {
	switch {
	case code == 0 || code == 1:
		return "clear"
	case code == 2 || code == 3:
		return "cloudy"
	case code == 45 || code == 48:
		return "fog"
	case code >= 51 && code <= 57:
		return "drizzle"
	case code >= 61 && code <= 67:
		return "rain"
	case code >= 71 && code <= 77 || code == 85 || code == 86:
		return "snow"
	case code >= 80 && code <= 82:
		return "showers"
	case code >= 95 && code <= 99:
		return "thunderstorm"
	default:
		return "unknown"
	}
}
