package weather

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/appstest"
)

// fakeOpenMeteo serves the two endpoints the app uses.
func fakeOpenMeteo(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/search", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("name") == "Atlantis" {
			_, _ = w.Write([]byte(`{}`))
			return
		}
		_, _ = w.Write([]byte(`{"results":[{"name":"Paris","country":"France","latitude":48.8534,"longitude":2.3488}]}`))
	})
	mux.HandleFunc("/v1/forecast", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("latitude") != "48.8534" {
			http.Error(w, "wrong place", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"current":{"temperature_2m":17.26,"wind_speed_10m":11.04,"weather_code":61}}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// envFor returns an Env whose HTTP client sends every request to srv.
func envFor(srv *httptest.Server) *appstest.Env {
	env := appstest.NewEnv()
	env.SetHTTP(&http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
		},
	}})
	return env
}

func TestCurrentWeather(t *testing.T) {
	srv := fakeOpenMeteo(t)
	// The app speaks https; the fake speaks plain HTTP behind a transport
	// that treats every connection as already secured.
	env := envFor(srv)
	tr := env.HTTP().Transport.(*http.Transport)
	tr.DialTLSContext = tr.DialContext
	tests := []struct {
		city, want, wantErr string
	}{
		{"Paris", `{"city":"Paris","country":"France","temperature_c":17.3,"wind_kmh":11,"conditions":"rain"}`, ""},
		{"Atlantis", "", `no city named "Atlantis"`},
	}
	for _, tt := range tests {
		out, err := app{}.Call(context.Background(), env, "current_weather", json.RawMessage(`{"city":"`+tt.city+`"}`))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error = %v, want %q", tt.city, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.city, err)
		}
		if string(out) != tt.want {
			t.Errorf("%s: got %s, want %s", tt.city, out, tt.want)
		}
		if err := apps.ValidateDocument(spec.Functions[0].Response, out); err != nil {
			t.Errorf("result does not match the response schema: %v", err)
		}
	}
}

func TestConditions(t *testing.T) {
	for code, want := range map[int]string{0: "clear", 3: "cloudy", 45: "fog", 53: "drizzle", 65: "rain", 75: "snow", 81: "showers", 95: "thunderstorm", 42: "unknown"} {
		if got := conditions(code); got != want {
			t.Errorf("conditions(%d) = %s, want %s", code, got, want)
		}
	}
}

func TestWithoutNetworkTheAppFailsCleanly(t *testing.T) {
	env := appstest.NewEnv()
	_, err := app{}.Call(context.Background(), env, "current_weather", json.RawMessage(`{"city":"Paris"}`))
	if err == nil || len(env.RefusedRequests()) != 1 {
		t.Fatalf("err = %v, refused = %v", err, env.RefusedRequests())
	}
}
