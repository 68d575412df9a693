// Package all links every built-in app into the binary: importing it runs
// each app package's init, which registers its apps with apps.Register. It
// holds no code and must never be imported by an app package.
package all

import (
	_ "github.com/secgpt/secgpt/apps/annotation" // creative_muse, symptom_solver
	_ "github.com/secgpt/secgpt/apps/health"     // health_companion
	_ "github.com/secgpt/secgpt/apps/mail"       // email, drive
	_ "github.com/secgpt/secgpt/apps/ride"       // metro_hail, quick_ride
	_ "github.com/secgpt/secgpt/apps/travel"     // travel_mate
	_ "github.com/secgpt/secgpt/apps/weather"    // weather
)
