// What the supervisor tells an HTTP front at fork time, through the TILE_FRONT environment variable.
import type { ServiceConfig } from '../config/config.js';

export interface FrontConfig {
  service: ServiceConfig;
  /** This front's number, 0-based, and how many there are (a model's queue is shared out). */
  index: number;
  fronts: number;
}
