// Preloaded into the conformance referee (NODE_OPTIONS="--require .../bindlocal.cjs"): its mock servers
// call listen() without a host, which binds every interface. Such a listen is bound to 127.0.0.1 instead,
// synchronously (a TCP handle bound first, then handed to listen), because the scenarios read
// server.address() right after listen() returns.
'use strict';
const net = require('net');
const { TCP, constants } = process.binding('tcp_wrap');
const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
  const first = args[0];
  const hostGiven =
    typeof args[1] === 'string' || (first !== null && typeof first === 'object' && 'host' in first);
  const pathOrHandle =
    typeof first === 'string' || (first !== null && typeof first === 'object' && !('port' in first));
  if (hostGiven || pathOrHandle) {
    return listen.apply(this, args);
  }
  const port = typeof first === 'object' && first !== null ? Number(first.port || 0) : Number(first || 0);
  const callback = args.find((arg) => typeof arg === 'function');
  const handle = new TCP(constants.SERVER);
  const failed = handle.bind('127.0.0.1', port);
  if (failed) {
    throw new Error(`bindlocal: cannot bind 127.0.0.1:${port} (${failed})`);
  }
  return callback ? listen.call(this, handle, callback) : listen.call(this, handle);
};
