package main

// The agent's routes, by method and path (router.py); an error a route raises (a Refusal) is
// answered here, under its code's one status.

import "strings"

type route struct{ method, path string }

var routes map[route]func(*Exchange)

func init() {
	routes = map[route]func(*Exchange){
		{"GET", RouteHealth}:    health,
		{"POST", RouteQuiesce}:  quiesce,
		{"POST", RouteTunnel}:   tunnel,
		{"POST", RouteExec}:     runExec,
		{"GET", RouteProcs}:     listProcs,
		{"POST", RouteProcs}:    spawnProc,
		{"GET", RouteFiles}:     readFile,
		{"PUT", RouteFiles}:     writeFile,
		{"GET", RouteDirZip}:    zipDir,
		{"GET", RouteFsStat}:    fsStat,
		{"GET", RouteFsList}:    fsList,
		{"GET", RouteFsWatch}:   fsWatch,
		{"POST", RouteFsMkdir}:  fsMkdir,
		{"POST", RouteFsMove}:   fsMove,
		{"POST", RouteFsRemove}: fsRemove,
	}
}

func dispatch(ex *Exchange) {
	method, path := ex.method, ex.route()
	answer := routes[route{method, path}]
	if answer == nil && (method == "GET" || method == "POST") && strings.HasPrefix(path, RouteProcs+"/") {
		answer = func(ex *Exchange) { procRoute(ex, method) }
	}
	defer func() {
		if r := recover(); r != nil {
			ref, ok := r.(*Refusal)
			if !ok || ex.headSent { // too late for an error answer: the connection ends
				panic(r)
			}
			ex.refuseWith(ref.Code, ref.Message)
		}
	}()
	if answer == nil {
		refuse(ErrNoRoute, "no such route")
	}
	answer(ex)
}
