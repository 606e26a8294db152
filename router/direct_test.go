package router_test

import (
	"context"

	"connectrpc.com/connect"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/router"
)

func routeDirect(r *router.Router, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	resp, err := r.Route(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
