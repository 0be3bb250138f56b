// Starts GraphiQL on this server's endpoints. Loaded as a file (the page's
// Content-Security-Policy allows no inline script); its settings come from the page's
// JSON block, which the server writes.
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("kfs-graphiql-config").textContent);
  var httpUrl = new URL(config.endpoint, window.location.href).toString();
  var wsUrl = new URL(config.subscriptionEndpoint, window.location.href);
  wsUrl.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";

  // One fetcher per set of headers: GraphiQL sends the Headers tab with every HTTP
  // request, and the same headers go into the WebSocket's connection_init, so a token
  // pasted into the Headers tab authenticates subscriptions too.
  var fetchers = new Map();
  function fetcherFor(headers) {
    var key = JSON.stringify(headers);
    if (!fetchers.has(key)) {
      fetchers.set(
        key,
        GraphiQL.createFetcher({
          url: httpUrl,
          subscriptionUrl: wsUrl.toString(),
          headers: headers,
          wsConnectionParams: headers,
        })
      );
    }
    return fetchers.get(key);
  }
  function fetcher(params, options) {
    var headers = Object.assign({}, config.headers, (options && options.headers) || {});
    // GraphiQL's fetcher sends an operation over the WebSocket when the parsed document
    // it is given says it is a subscription. GraphiQL parses the editor after a pause, so
    // a document run right after it was pasted can come with the previous one's parse,
    // and a subscription would go over HTTP: parse the query that is actually sent.
    var withDocument = Object.assign({}, options);
    try {
      withDocument.documentAST = GraphiQL.GraphQL.parse(params.query);
    } catch (unparsable) {
      // The server explains the syntax error.
    }
    return fetcherFor(headers)(params, withDocument);
  }

  var plugins = [];
  if (window.GraphiQLPluginExplorer) {
    plugins.push(GraphiQLPluginExplorer.explorerPlugin());
  }
  var root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      plugins: plugins,
      defaultQuery: config.defaultQuery,
      defaultEditorToolsVisibility: true,
    })
  );
})();
