// On close, responses still in flight carry `Connection: close`, so keep-alive clients let go of
// their connections and the server can finish closing as soon as the last response is out.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

async function gracefulClose(app: FastifyInstance): Promise<void> {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
}

export default fp(gracefulClose, { name: 'graceful-close' });
