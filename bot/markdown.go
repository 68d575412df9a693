package bot

import (
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/format/mdext"
)

// markdown renders the bot's messages. Raw HTML is escaped, as text (the
// text may come from an app or the model); images are never embedded (a
// remote image would tell its server who read the message, and when) but
// named with their address; and a link shows where it goes beside its
// text, so that a label cannot pose as another address.
var markdown = goldmark.New(format.Extensions, format.HTMLOptions,
	goldmark.WithExtensions(mdext.EscapeHTML),
	goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(inertMedia{}, 0))))

// inertMedia turns images into text naming their address, and links into
// their text followed by their target. A link to a Matrix user (a pill,
// such as a prompt's mention of the asking user) stays: clients show it as
// the user it points to, whatever its text says.
type inertMedia struct{}

// userPill reports whether a link's destination is a Matrix user.
func userPill(dest []byte) bool {
	d := string(dest)
	return strings.HasPrefix(d, "https://matrix.to/#/@") || strings.HasPrefix(d, "matrix:u/")
}

func (inertMedia) Transform(doc *ast.Document, reader text.Reader, _ parser.Context) {
	var images, links []ast.Node
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			switch n.(type) {
			case *ast.Image:
				images = append(images, n)
			case *ast.Link:
				links = append(links, n)
			}
		}
		return ast.WalkContinue, nil
	})
	for _, n := range images {
		img := n.(*ast.Image)
		img.Parent().ReplaceChild(img.Parent(), img, ast.NewString([]byte("[image not shown: "+string(img.Destination)+"]")))
	}
	for _, n := range links {
		link := n.(*ast.Link)
		if userPill(link.Destination) {
			continue
		}
		parent := link.Parent()
		for c := link.FirstChild(); c != nil; c = link.FirstChild() {
			parent.InsertBefore(parent, link, c)
		}
		parent.ReplaceChild(parent, link, ast.NewString([]byte(" ("+string(link.Destination)+")")))
	}
}
